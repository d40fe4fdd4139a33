//! `lbctl`: inspect and explain what the node's load balancer does.

fn main() -> std::process::ExitCode {
    lb_cli::main()
}
