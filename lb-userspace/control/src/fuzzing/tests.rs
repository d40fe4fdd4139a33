//! The saved corpus and the regression seeds of every fuzz target, through the same
//! entry functions the fuzzer calls: an input that once crashed stays a test.

use std::path::{Path, PathBuf};

use super::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Every file of `dir` (none if it does not exist), sorted.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn every_target_has_regression_seeds_and_survives_them_and_its_corpus() {
    let mut failed = Vec::new();
    for (name, entry) in TARGETS {
        let seeds = inputs(&fuzz_dir().join("regressions").join(name));
        assert!(!seeds.is_empty(), "fuzz/regressions/{name}/ has no seeds");
        let corpus = inputs(&fuzz_dir().join("corpus").join(name));
        for path in seeds.iter().chain(&corpus) {
            let data = match std::fs::read(path) {
                Ok(data) => data,
                // A fuzzer running meanwhile replaces corpus files with smaller ones.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("{}: {e}", path.display()),
            };
            if std::panic::catch_unwind(|| entry(&data)).is_err() {
                failed.push(path.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "fuzz inputs that panic: {failed:#?}");
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    for (name, _) in TARGETS {
        let file = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        assert!(file.is_file(), "{} is missing", file.display());
    }
}
