//! The fuzz corpora replayed as ordinary tests: every file of `fuzz/corpus/<target>/`
//! fed to the entry function its target calls (`fuzz/src/lib.rs`, included here by
//! path), so that CI, on stable and without cargo-fuzz, keeps every input fuzzing
//! found (and every crash fixed) passing. docs/fuzzing.md.

#![allow(clippy::unwrap_used)] // A test binary: a panic is the failure report.

#[allow(unreachable_pub, dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod entries;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of a target's corpus, in name order.
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Run on a thread of 64 MiB: a debug build's frames are several times a release
/// build's, and a deeply nested config input (toml's recursion) overflows a test
/// thread's 2 MiB there, where the fuzzer's release build on 8 MiB passed it.
#[test]
fn every_corpus_file_passes_its_target() {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(replay_every_corpus)
        .unwrap()
        .join()
        .unwrap();
}

fn replay_every_corpus() {
    let mut failed = Vec::new();
    let mut fed = 0;
    for (target, entry) in entries::TARGETS {
        let files = corpus(target);
        assert!(!files.is_empty(), "fuzz/corpus/{target}/ is empty");
        for file in files {
            let data = std::fs::read(&file).unwrap();
            fed += 1;
            if catch_unwind(AssertUnwindSafe(|| entry(&data))).is_err() {
                failed.push(file.display().to_string());
            }
        }
    }
    assert!(
        failed.is_empty(),
        "inputs that fail their target: {failed:#?}"
    );
    assert!(fed > 0);
}

/// Every target the fuzz crate builds is replayed here, and every corpus folder
/// belongs to one: a target added to `fuzz/Cargo.toml` without its entry in
/// `TARGETS` (or the other way round) fails.
#[test]
fn the_replayed_targets_are_the_fuzz_crates_targets() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let mut built: Vec<&str> = manifest
        .split("[[bin]]")
        .skip(1)
        .filter_map(|bin| {
            bin.lines()
                .find_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"'))
        })
        .collect();
    built.sort_unstable();
    let mut replayed: Vec<&str> = entries::TARGETS.iter().map(|(n, _)| *n).collect();
    replayed.sort_unstable();
    assert_eq!(built, replayed);
    let mut folders: Vec<String> = std::fs::read_dir(fuzz_dir().join("corpus"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    folders.sort_unstable();
    assert_eq!(folders, replayed);
}

/// The framing the targets share reads what the seeds write.
#[test]
fn a_framed_message_is_subject_headers_then_payload() {
    let m = entries::Framed::read(b"orders.1\nTraceparent: 00-x\nNo-Colon\n\n{\"a\":1}\n\n");
    assert_eq!(m.subject, "orders.1");
    assert_eq!(
        m.headers,
        vec![
            ("Traceparent".to_string(), "00-x".to_string()),
            ("No-Colon".to_string(), String::new())
        ]
    );
    assert_eq!(m.payload, b"{\"a\":1}\n\n");
}

/// The config target reads a config as `jetrelay run` does, environment included:
/// a good one gives settings, and a variable is read over the file.
#[test]
fn the_config_target_reads_the_file_and_the_environment() {
    let file =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/durable.toml")).unwrap();
    assert_eq!(entries::config_read(&file), Some(Ok(())));
    let mut with_env = file.clone();
    with_env.extend_from_slice(b"\0HTTP__TIMEOUT_MS=soon\n");
    let shown = entries::config_read(&with_env).unwrap().unwrap_err();
    assert!(shown.contains("timeout_ms"), "{shown}");
}
