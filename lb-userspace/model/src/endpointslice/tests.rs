use std::path::PathBuf;

use super::*;

/// The shared corpus (`shared/testdata/endpointslices` beside the repository, or under
/// `$LB_SHARED_DIR`). Read in place: it holds other projects' documents, which are not
/// copied into this repository.
fn corpus_dir() -> PathBuf {
    let shared = std::env::var_os("LB_SHARED_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
        PathBuf::from,
    );
    shared.join("testdata/endpointslices/corpus")
}

fn corpus(name: &str) -> Parsed {
    let path = corpus_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

type Backends = ServiceBackends;

fn port<'a>(b: &'a Backends, ns: &str, svc: &str, name: &str, proto: &str) -> &'a [PortBackend] {
    b.get(&(ns.to_owned(), svc.to_owned()))
        .and_then(|p| p.get(&(name.to_owned(), proto.to_owned())))
        .map_or(&[], Vec::as_slice)
}

fn new_flows(list: &[PortBackend]) -> Vec<String> {
    for_new_flows(list)
        .iter()
        .map(|b| format!("{}:{}", b.addr, b.port))
        .collect()
}

#[test]
fn the_whole_corpus_ingests_26_slices_and_ignores_7_documents() {
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("shared corpus beside the repository")
        .map(|e| {
            e.expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8 name")
        })
        .collect();
    names.sort();
    assert_eq!(names.len(), 14);
    let (mut slices, mut ignored) = (0, 0);
    for n in &names {
        let p = corpus(n);
        slices += p.slices.len();
        ignored += p.ignored.len();
    }
    assert_eq!((slices, ignored), (26, 7));
}

#[test]
fn the_fast_path_agrees_with_the_generic_one_on_every_file_it_takes() {
    let mut fast = 0;
    for entry in std::fs::read_dir(corpus_dir()).expect("shared corpus") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        let Some(docs) = typed_yaml(&text) else {
            continue;
        };
        if text.trim_start().starts_with('{') {
            let json = typed_json(&text)
                .expect("a JSON file the YAML fast path takes is JSON the JSON one takes");
            assert_eq!(from_typed(json), parse_generic(&text).expect("parses"));
        }
        fast += 1;
        assert_eq!(
            from_typed(docs),
            parse_generic(&text).expect("parses"),
            "{}",
            path.display()
        );
    }
    assert!(fast >= 10, "most corpus files take the fast path: {fast}");
}

#[test]
fn lists_named_ports_and_namespaces() {
    // 01: an EndpointSliceList whose items have no kind/apiVersion; TCP and UDP ports.
    let b = backends(&corpus("01-kind-cluster-endpointslicelist.json").slices);
    assert_eq!(
        new_flows(port(&b, "kube-system", "kube-dns", "dns", "UDP")),
        ["10.244.0.3:53"]
    );
    assert_eq!(
        new_flows(port(&b, "default", "kubernetes", "https", "TCP")),
        ["172.18.0.2:6443"]
    );
    // 02: one port name, different target ports per slice; same service name in two
    // namespaces stays two services.
    let b = backends(&corpus("02-named-multiport.yaml").slices);
    assert_eq!(
        new_flows(port(&b, "shop", "web", "http", "TCP")),
        ["198.18.10.11:8080", "198.18.10.21:8081"]
    );
    assert_eq!(
        new_flows(port(&b, "staging", "echo", "http", "TCP")),
        ["198.18.11.5:80"]
    );
    assert_eq!(
        new_flows(port(&b, "test", "echo", "http", "TCP")),
        ["10.244.1.1:80"]
    );
    // 09: kubectl's List wrapper with managedFields noise.
    let b = backends(&corpus("09-kubectl-list-managedfields.yaml").slices);
    assert_eq!(port(&b, "checkout", "cart", "https", "TCP").len(), 5);
    assert_eq!(
        new_flows(port(&b, "checkout", "cart", "https", "TCP")).len(),
        4
    );
}

#[test]
fn conditions_drain_and_fall_back() {
    // 04: the only endpoint is serving+terminating: it takes new flows as the fallback.
    let b = backends(&corpus("04-all-endpoints-terminating.yaml").slices);
    let list = port(&b, "test", "graceful-term-svc", "", "TCP");
    assert_eq!(list[0].state, EndpointState::Draining);
    assert_eq!(new_flows(list), ["10.244.0.112:8081"]);
    // 05: one ready, one draining: new flows only to the ready one, both kept.
    let b = backends(&corpus("05-termination-flow-single.json").slices);
    let list = port(&b, "default", "nginx-service", "", "TCP");
    assert_eq!(
        (list.len(), new_flows(list)),
        (2, vec!["10.12.1.202:80".to_owned()])
    );
    // 07: nil conditions mean ready; nil serving with terminating drains.
    let b = backends(&corpus("07-nil-conditions.yaml").slices);
    assert_eq!(
        port(&b, "test", "echo2", "http2", "TCP").len(),
        9,
        "no conditions at all: ready"
    );
    let cache = port(&b, "legacy", "cache", "", "TCP");
    assert_eq!(
        (cache.len(), new_flows(cache)),
        (2, vec!["198.18.21.1:6379".to_owned()])
    );
}

#[test]
fn families_fqdn_and_first_address_only() {
    // 03: one slice per family, both kept; the consumer picks its VIP's family.
    let b = backends(&corpus("03-dualstack-two-slices.yaml").slices);
    let http = port(&b, "default", "echo-dualstack", "http", "TCP");
    assert_eq!(
        (http.iter().filter(|x| x.addr.is_ipv6()).count(), http.len()),
        (2, 4)
    );
    // 08: FQDN slices are ignored even when an address looks like an IP.
    let fqdn = corpus("08-fqdn.yaml");
    assert!(fqdn.slices.is_empty());
    assert!(
        fqdn.ignored
            .iter()
            .all(|i| i.reason.contains("addressType Some(\"FQDN\")"))
    );
    // 14: three addresses per endpoint: only the first is used (kube-proxy's reading).
    let b = backends(&corpus("14-multi-address-endpoints.yaml").slices);
    assert_eq!(
        new_flows(port(&b, "test", "echo", "http", "TCP")),
        ["10.244.1.1:80", "10.244.2.1:80", "10.244.3.1:80"]
    );
    // 06: IPv6, publishNotReadyAddresses endpoints (ready despite serving:false).
    let b = backends(&corpus("06-ipv6-rollout-and-headless.yaml").slices);
    assert_eq!(
        new_flows(port(&b, "payments", "ledger-peers", "peer", "TCP")).len(),
        3
    );
    assert_eq!(
        new_flows(port(&b, "payments", "ledger-grpc", "grpc", "TCP")).len(),
        2
    );
}

#[test]
fn sizes_duplicates_and_empty_slices() {
    // 10: 120 endpoints, 119 distinct IPs; one excluded, one draining, and the reused
    // IP keeps its ready copy.
    let b = backends(&corpus("10-100-endpoints-plus-overflow.yaml").slices);
    let list = port(&b, "bulk", "fanout", "http", "TCP");
    assert_eq!((list.len(), new_flows(list).len()), (118, 117));
    let reused = list
        .iter()
        .find(|x| x.addr == IpAddr::from([198, 18, 50, 77]))
        .expect("reused IP");
    assert_eq!(reused.state, EndpointState::Ready);
    // 11: placeholders and port-less slices give no backends; nothing on port 0.
    let b = backends(&corpus("11-empty-placeholder-and-portless.yaml").slices);
    assert!(port(&b, "ops", "maintenance-page", "http", "TCP").is_empty());
    let all: Vec<&PortBackend> = b.values().flat_map(|p| p.values().flatten()).collect();
    assert!(all.iter().all(|x| x.port != 0));
    assert_eq!(
        all.len(),
        1,
        "only the slice with a port contributes: {all:?}"
    );
}

#[test]
fn must_ignore_and_fuzz_fixtures_are_ignored_with_reasons() {
    let ignored = corpus("12-must-ignore.yaml").ignored;
    let reasons: Vec<&str> = ignored.iter().map(|i| i.reason.as_str()).collect();
    assert_eq!(reasons.len(), 4);
    assert!(reasons[0].contains("addressType"), "{reasons:?}");
    assert!(
        reasons[1].contains("no kubernetes.io/service-name label"),
        "{reasons:?}"
    );
    assert!(reasons[2].contains("Endpoints"), "{reasons:?}");
    assert!(reasons[3].contains("v1beta1"), "{reasons:?}");
    let fuzz = corpus("13-apimachinery-fuzz-fixture.json");
    assert_eq!((fuzz.slices.len(), fuzz.ignored.len()), (0, 1));
}

#[test]
fn creation_times_feed_fade_in() {
    let slice = &corpus("04-all-endpoints-terminating.yaml").slices[0];
    assert_eq!(
        slice.created,
        crate::units::parse_rfc3339("2023-02-02T01:21:10Z").ok()
    );
    assert!(slice.created.is_some());
    // `creationTimestamp: null` (API fixtures, dry runs) is no time, not an error.
    let null = WEB_YAML.replace("\"2024-01-01T00:00:00Z\"", "null");
    assert_eq!(parse(&null).expect("valid").slices[0].created, None);
}

#[test]
fn malformed_text_is_an_error_not_a_panic() {
    assert!(parse("a: [unclosed").is_err());
    assert_eq!(parse("").expect("empty"), Parsed::default());
}

/// A slice as `kubectl get -o yaml` writes it, with its creation time on line 6.
const WEB_YAML: &str = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n  namespace: shop\n  creationTimestamp: \"2024-01-01T00:00:00Z\"\n  labels:\n    kubernetes.io/service-name: web\naddressType: IPv4\nendpoints:\n- addresses: [\"198.18.0.11\"]\nports:\n- name: http\n  port: 80\n";
const WEB_JSON: &str = r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"web-1","namespace":"shop","creationTimestamp":"2024-01-01T00:00:00Z","labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv4","endpoints":[{"addresses":["198.18.0.11"]}],"ports":[{"name":"http","port":80}]}"#;

/// The creation times of issue 14 (the old parser sliced inside a character and
/// panicked): the document is refused, the error names the field and the line.
#[test]
fn a_creation_time_that_is_not_rfc3339_refuses_the_file_with_field_and_line() {
    for bad in [
        "2024-01-01T00:00:00+0\u{e9}00",
        "2024-01-01T00:00:00+00\u{e9}0",
        "2024-01-01T00:00:00+0\u{20ac}0",
        "yesterday",
    ] {
        for (text, line) in [(WEB_YAML, "line 6"), (WEB_JSON, "line 1")] {
            let text = text.replace("2024-01-01T00:00:00Z", bad);
            let e = parse(&text).expect_err(bad).to_string();
            assert!(e.contains("metadata.creationTimestamp"), "{e}");
            assert!(e.contains(line), "{e}");
            assert!(
                e.contains(&format!("{bad:?} is not an RFC 3339 time")),
                "{e}"
            );
        }
        // Inside a list too: the item's path and line.
        let list = format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSliceList\nitems:\n- {}",
            WEB_YAML
                .replace("2024-01-01T00:00:00Z", bad)
                .lines()
                .filter(|l| !l.starts_with("apiVersion") && !l.starts_with("kind"))
                .collect::<Vec<_>>()
                .join("\n  ")
        );
        let e = parse(&list).expect_err(bad).to_string();
        assert!(e.contains("items[0].metadata.creationTimestamp"), "{e}");
        assert!(e.contains("line 7"), "{e}");
    }
    assert!(parse(WEB_YAML).is_ok() && parse(WEB_JSON).is_ok());
}

/// In a kubectl `List`, an item that is not ours is skipped unread, however its fields
/// look; a malformed slice after it is named by its own index and line.
#[test]
fn a_list_item_that_is_not_ours_is_skipped_and_a_bad_slice_after_it_is_named() {
    let service = "- apiVersion: v1\n  kind: Service\n  metadata: [not, a, mapping]\n  ports:\n  - port: http\n  endpoints: nope\n";
    let slice = WEB_YAML
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect::<String>()
        .replacen("  ", "- ", 1);
    let good = format!("apiVersion: v1\nkind: List\nitems:\n{service}{slice}");
    let parsed = parse(&good).expect("the Service is ignored, not judged");
    assert_eq!(parsed.slices.len(), 1);
    assert_eq!(parsed.slices[0].name, "web-1");
    assert_eq!(parsed.ignored.len(), 1);
    assert!(
        parsed.ignored[0].reason.contains("\"Service\""),
        "{parsed:?}"
    );
    // The slice's creation time is on line 15 of the file, its value at column 24.
    let bad = good.replace("2024-01-01T00:00:00Z", "yesterday");
    let e = parse(&bad).expect_err("malformed slice").to_string();
    assert!(
        e.starts_with("document 0: malformed EndpointSlice: items[1].metadata.creationTimestamp: "),
        "{e}"
    );
    assert!(e.contains("line 15 column 24"), "{e}");
}

/// Documents are counted as they stand in the file, empty ones too, and lines are the
/// file's, not the document's.
#[test]
fn a_malformed_document_is_named_by_its_place_in_the_stream() {
    let bad = WEB_YAML.replace("2024-01-01T00:00:00Z", "yesterday");
    let text = format!("kind: Service\napiVersion: v1\n---\n---\n{bad}");
    let e = parse(&text).expect_err("malformed").to_string();
    assert!(
        e.starts_with("document 2: malformed EndpointSlice: metadata.creationTimestamp: "),
        "{e}"
    );
    assert!(e.contains("at line 10 column 22"), "{e}");
}

/// `kubectl get endpointslices -A -o yaml` of a large cluster is one document with
/// hundreds of thousands of nodes, and a directory may hold a stream of thousands of
/// documents: neither meets a reader's fixed budget.
#[test]
fn large_streams_and_lists_are_read_whole() {
    let stream = (0..1500)
        .map(|i| WEB_YAML.replace("web-1", &format!("web-{i}")))
        .collect::<Vec<_>>()
        .join("---\n");
    assert_eq!(parse(&stream).expect("1500 documents").slices.len(), 1500);
    let endpoint =
        "  - addresses: [\"198.18.0.11\"]\n    conditions: {ready: true, serving: true}\n";
    let list = format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSliceList\nitems:\n- addressType: IPv4\n  metadata:\n    name: big\n    labels:\n      kubernetes.io/service-name: web\n  ports: [{{port: 80}}]\n  endpoints:\n{}",
        endpoint.repeat(26_000)
    );
    let parsed = parse(&list).expect("one list of 26 000 endpoints (over 250 k nodes)");
    assert_eq!(parsed.slices[0].endpoints.len(), 26_000);
}

/// Aliases that expand exponentially (a "billion laughs" document) are refused with an
/// error instead of being expanded: a hostile file in the slice directory costs lbd a
/// refused file, not its memory.
#[test]
fn alias_bombs_are_refused_not_expanded() {
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let text = format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\naddressType: IPv4\nmetadata:\n  name: bomb\n  labels:\n    kubernetes.io/service-name: web\n  annotations:\n{}endpoints: []\n",
        bomb.lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    let result = parse(&text);
    assert!(result.is_err(), "10^12 expanded nodes accepted: {result:?}");
}
