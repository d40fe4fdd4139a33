//! Route errors in a config, as operators see them: the route compiler's message
//! (line, column, what was expected) under the service and field that hold the text.
//! How a `routes_file` is found and its errors wrapped with its path is lb-model's
//! (`config::tests`, with a stand-in checker); here is the real compiler's wording.

use lb_model::config;

use super::check_routes;

const L7: &str = r#"
[node]
interface = "eth0"

[[service]]
name = "site"
vip = "198.18.0.100"
port = 80
mode = "l7"
backends = [{ address = "198.18.0.11" }]
routes = '''
  hi: Path("/hi") -> inlineContent("hi") -> <shunt>;
  all: * -> <roundRobin>;
'''
"#;

fn err(text: &str) -> String {
    config::parse(text, "lbd.toml", check_routes)
        .expect_err("config should be rejected")
        .to_string()
}

#[test]
fn inline_route_errors_name_service_field_line_and_column() {
    config::parse(L7, "lbd.toml", check_routes).expect("valid");
    let e = err(&L7.replace("<shunt>;\n  all", "<shunt>\n  all"));
    assert!(
        e.contains(
            "service[0] (site).routes: line 2, column 3: expected `;` between routes, found `all`"
        ),
        "{e}"
    );
    let e = err(&L7.replace("inlineContent(\"hi\")", "inlineContnt(\"hi\")"));
    assert!(
        e.contains("route hi: inlineContnt: unknown filter `inlineContnt`"),
        "{e}"
    );
}

#[test]
fn every_route_error_of_a_text_is_reported_each_on_its_own_line() {
    let broken = L7
        .replace("<shunt>;\n  all", "<shunt>\n  all")
        .replace("<roundRobin>;", "<roundRobin> -> ;");
    let e = err(&broken);
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 2, "{e}");
    assert!(
        lines[0].contains("service[0] (site).routes: line 2, column 3:"),
        "{e}"
    );
    assert!(lines[1].starts_with("  line 2, column 26: "), "{e}");
}
