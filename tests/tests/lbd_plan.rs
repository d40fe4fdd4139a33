//! `lbd --check-config --plan` prints what the data plane would hold: each service's
//! backends, weights and table slots, from the config file and its slice directory,
//! without loading or touching anything.

use lb_testbed::lbd::{TempDir, run_lbd};

/// `(address, weight, slots)` of every backend line under the service line naming
/// `service`.
fn backend_lines(out: &str, service: &str) -> Vec<(String, u32, usize)> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.contains(&format!(" {service} ")));
    lines.next().expect("the service's line");
    lines
        .take_while(|l| l.starts_with("      "))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = |key: &str| {
                let i = words.iter().position(|w| *w == key).expect(key);
                words[i + 1]
            };
            (
                words[0].to_owned(),
                at("weight").parse().expect("weight"),
                at("slots").parse().expect("slots"),
            )
        })
        .collect()
}

#[test]
fn the_plan_shows_backends_weights_and_slots_from_the_file_and_its_slices() {
    let dir = TempDir::new("plan");
    let slices = dir.path().join("slices");
    std::fs::create_dir_all(&slices).expect("slice dir");
    std::fs::write(
        slices.join("api.json"),
        r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
            "metadata":{"name":"api-1","namespace":"shop","labels":{"kubernetes.io/service-name":"api"}},
            "addressType":"IPv4",
            "endpoints":[{"addresses":["198.18.1.1"]},{"addresses":["198.18.1.2"],"conditions":{"ready":false,"terminating":true}}],
            "ports":[{"name":"http","port":8080}]}"#,
    )
    .expect("slice");
    let config = format!(
        r#"[node]
interface = "eth0"
pin_path = "{pins}"
state_dir = ""
endpointslice_dir = "{slices}"
nat_addresses = ["198.18.0.2"]

[[service]]
name = "web"
vip = "198.18.100.1"
port = 80
table_size = 1009
backends = [{{ address = "198.18.0.11", weight = 1 }}, {{ address = "198.18.0.12", weight = 3 }}]

[[service]]
name = "api"
vip = "198.18.100.2"
port = 80
mode = "nat"
endpoint_slices = {{ namespace = "shop", service = "api", port = "http" }}
"#,
        pins = dir.path().join("no-pins").display(),
        slices = slices.display()
    );
    let path = dir.write("lbd.toml", &config);
    let path = path.to_str().expect("utf-8");
    let (code, out) = run_lbd(&["--config", path, "--check-config", "--plan"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("plan against empty maps (nothing pinned at"),
        "{out}"
    );
    assert!(
        out.contains("add web 198.18.100.1:80/tcp (dsr): 2 backends, table 1009 slots"),
        "{out}"
    );
    let web = backend_lines(&out, "web");
    assert_eq!(web.len(), 2, "{out}");
    assert_eq!(
        web[0].2 + web[1].2,
        1009,
        "every slot belongs to a backend: {web:?}"
    );
    // Weights 1:3 shape the table: the heavier backend gets about three times the slots.
    let ratio = web[1].2 as f64 / web[0].2 as f64;
    assert!((2.7..=3.3).contains(&ratio), "{web:?}");
    // From the slice: the ready endpoint takes new flows, the terminating one only
    // keeps its own (weight 0, no slots), both on the target port.
    let api = backend_lines(&out, "api");
    assert_eq!(
        api.iter()
            .map(|(a, w, _)| (a.as_str(), *w))
            .collect::<Vec<_>>(),
        [("198.18.1.1", 1), ("198.18.1.2", 0)],
        "{out}"
    );
    assert_eq!(api[1].2, 0, "{out}");
    assert!(out.contains("198.18.1.1 port 8080"), "{out}");
    assert!(
        out.contains("2 to write, 0 to remove, 0 unchanged"),
        "{out}"
    );
    assert!(
        !dir.path().join("no-pins").exists(),
        "a check creates nothing"
    );

    // A plan flag without --check-config is refused (it never starts the agent).
    let (code, out) = run_lbd(&["--config", path, "--plan"]);
    assert_eq!(code, Some(2), "{out}");
}
