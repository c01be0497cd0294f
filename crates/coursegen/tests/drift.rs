//! The committed crates under steps/ and solutions/ must be exactly what coursegen
//! renders from course/lab: edits belong in the master, not in the generated copies.
use std::path::Path;

#[test]
fn generated_crates_match_the_master() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let drift = coursegen::check_all(&root).unwrap_or_else(|e| panic!("cannot render the course: {e}"));
    if !drift.is_empty() {
        let list: Vec<String> = drift.iter().map(|d| d.to_string()).collect();
        panic!(
            "{} generated file(s) drifted from course/lab:\n{}\nrun `cargo run -p coursegen -- write`",
            drift.len(),
            list.join("\n")
        );
    }
}
