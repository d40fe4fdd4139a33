//! The run loop over an in-memory data plane, with a real admin socket: answers keep
//! coming while the control thread is stuck in the middle of a reconcile, and the
//! reload it was doing lands once the data plane lets it.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use lb_admin::{ServiceView, Status};
use lb_l7::node::L7Node;
use lb_model::dataplane::{Programmer, memory::MemoryDataplane, memory::WriteGate};

use super::{Ended, Settings, Stop, run};
use crate::agent::{Agent, NoHost};

/// A config with `services` dsr services, its admin socket in `dir`.
fn config_text(dir: &Path, services: usize) -> String {
    let mut text = format!(
        "[node]\ninterface = \"eth0\"\nstate_dir = \"\"\npin_path = \"\"\nadmin_socket = \"{}\"\n",
        dir.join("admin.sock").display()
    );
    for i in 0..services {
        text.push_str(&format!(
            "[[service]]\nname = \"svc-{i}\"\nvip = \"198.18.{}.{}\"\nport = 80\nbackends = [{{ address = \"198.18.0.11\" }}, {{ address = \"198.18.0.12\" }}]\n",
            100 + i / 250,
            1 + i % 250
        ));
    }
    text
}

/// Polls `what` until it holds (bounded: the loop gives up after `limit`).
fn until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn admin_answers_while_a_reconcile_is_stuck_and_the_reload_lands_after() {
    let dir = TempDir(std::env::temp_dir().join(format!("lbd-runtime-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let path = dir.0.join("lbd.toml");
    std::fs::write(&path, config_text(&dir.0, 1)).expect("write");
    let config = lb_model::config::load(&path, lb_l7::check_routes).expect("config");
    let gate = Arc::new(WriteGate::default());
    let dataplane = MemoryDataplane {
        gate: Some(Arc::clone(&gate)),
        ..MemoryDataplane::default()
    };
    let agent = Agent::assemble(config, dataplane, NoHost, Programmer::default());
    let (stop, stop_rx) = tokio::sync::oneshot::channel();
    let settings = Settings {
        config_path: path.clone(),
        handover_path: dir.0.join("handover.sock"),
        started: Instant::now(),
        nat_sweep: None,
        stop: Some(stop_rx),
    };
    let lbd = std::thread::spawn(move || {
        run(agent, L7Node::with_listeners(Vec::new()), None, settings)
            .map(|ended: Ended<_, _>| (ended.stop, ended.agent.config().services.len()))
    });
    let socket = dir.0.join("admin.sock");
    let status = || lb_admin::client::get::<Status>(&socket, "/v1/status");
    let first = until(Duration::from_secs(10), "the admin socket", || {
        status().ok()
    });
    assert_eq!((first.services, first.config_generation), (1, 1));

    // The data plane stops taking writes; an edit adds 300 services, and the reload
    // the control thread starts for it gets stuck at its first write.
    gate.close();
    std::fs::write(&path, config_text(&dir.0, 301)).expect("write");
    until(Duration::from_secs(10), "a write held at the gate", || {
        (gate.waiting() > 0).then_some(())
    });
    // Answers still come, from the state before the reload.
    for _ in 0..20 {
        let now = status().expect("status while the reconcile is stuck");
        assert_eq!(now.services, 1, "the running state, not a half-applied one");
        assert_eq!(now.reconciles, first.reconciles);
        let services: Vec<ServiceView> =
            lb_admin::client::get(&socket, "/v1/services").expect("services");
        assert_eq!(services.len(), 1);
    }
    assert!(gate.waiting() > 0, "still stuck while it answered");

    // The data plane lets the writes through: the reload completes and shows.
    gate.open();
    let after = until(Duration::from_secs(30), "the reload applied", || {
        status()
            .ok()
            .filter(|s| s.config_generation == 2 && s.services == 301)
    });
    assert!(after.last_reconcile.is_some_and(|r| r.error.is_none()));
    let services: Vec<ServiceView> =
        lb_admin::client::get(&socket, "/v1/services").expect("services");
    assert_eq!(services.len(), 301);
    assert!(
        services
            .iter()
            .all(|s| s.table_size > 0 && s.service_id.is_some())
    );

    stop.send(Stop::TearDown).expect("the loop listens");
    let (stopped, services) = lbd.join().expect("no panic").expect("ran");
    assert_eq!((stopped, services), (Stop::TearDown, 301));
    assert!(
        !socket.exists(),
        "the admin socket is removed when the loop ends"
    );
}
