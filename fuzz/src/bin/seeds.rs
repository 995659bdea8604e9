//! Writes the seed corpus of both fuzz targets from real queues and
//! hand-written inputs, and the reproducers of the bugs fuzzing found:
//! `cargo run --bin seeds` in `fuzz/` (it replaces those files). Each is run
//! through its check; one that fails is still written (a bug reproducer
//! fails until the bug is fixed) and named at the end, and the program then
//! exits with an error.

use std::fs;
use std::panic;
use std::path::Path;

use dque_fuzz::checks;

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut failing = Vec::new();
    for seed in checks::seeds() {
        let dir = corpus.join(seed.target);
        fs::create_dir_all(&dir).expect("make the corpus directory");
        fs::write(dir.join(&seed.name), &seed.data).expect("write a seed");
        println!("{}/{} ({} bytes)", seed.target, seed.name, seed.data.len());
        let checked = panic::catch_unwind(|| match seed.target {
            "open" => {
                let outcome = checks::check_open(&seed.data);
                if let Some(expected) = &seed.outcome {
                    assert!(
                        checks::same_outcome(&outcome, expected),
                        "gave {outcome:?}, expected {expected:?}"
                    );
                }
            }
            "repair" => {
                let outcome = checks::check_repair(&seed.data, None);
                if let Some(expected) = &seed.repaired {
                    assert!(
                        checks::same_repair_outcome(&outcome, expected),
                        "gave {outcome:?}, expected {expected:?}"
                    );
                }
            }
            _ => checks::ops(&seed.data),
        });
        if checked.is_err() {
            failing.push(format!("{}/{}", seed.target, seed.name));
        }
    }
    if !failing.is_empty() {
        eprintln!("seeds that fail their check: {failing:?}");
        std::process::exit(1);
    }
}
