//! The "Beyond DDP" pages of the guide show what the code writes: the `checkpoint.json`
//! on the checkpoints page has exactly the fields, nested as they are, that labkit's
//! `save_checkpoint` writes.
use std::path::PathBuf;

use serde_json::Value;

fn page(name: &str) -> String {
    let path: PathBuf = guide_figures::figures_dir().parent().expect("lab-guide/src").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The text of the page's first fenced block of `language`.
fn fenced(page: &str, language: &str) -> String {
    let open = format!("```{language}\n");
    let start = page.find(&open).unwrap_or_else(|| panic!("no ```{language} block")) + open.len();
    let len = page[start..].find("```").expect("the block ends");
    page[start..start + len].to_string()
}

/// The JSON's keys and the kinds of its values, recursively: what a reader relies on,
/// without the values of one run.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().take(1).map(shape).collect()),
        Value::String(_) => Value::from("string"),
        Value::Number(_) => Value::from("number"),
        Value::Bool(_) => Value::from("bool"),
        Value::Null => Value::Null,
    }
}

#[test]
fn the_checkpoint_page_shows_the_fields_labkit_writes() {
    let shown: Value = serde_json::from_str(&fenced(&page("beyond/checkpoints.md"), "json"))
        .expect("the page's checkpoint.json is JSON");

    let dir = std::env::temp_dir().join(format!("guide-figures-checkpoint-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let options =
        labkit::CheckpointOptions { save_every: Some(1), checkpoint_dir: dir.clone(), resume: false };
    let vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let _layer = tch::nn::linear(vs.root() / "fc", 4, 2, Default::default());
    let mut early_stopping = labkit::EarlyStopping::new(0.85, 2);
    early_stopping.record(0.178);
    early_stopping.record(0.676);
    let state = labkit::TrainingState {
        epoch: 1,
        total_time: 16.6,
        learning_rate: 0.01,
        early_stopping: &early_stopping,
    };
    labkit::save_checkpoint(&options, &vs, state).expect("rank 0 of no group saves");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("checkpoint.json")).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(shape(&shown), shape(&written), "the page shows {shown:#}, labkit writes {written:#}");
    // The fields the page explains.
    assert_eq!(shown["epoch"], written["epoch"]);
    assert_eq!(shown["next_epoch"], written["next_epoch"]);
    assert_eq!(shown["weights"], written["weights"]);
    assert_eq!(shown["optimizer"], written["optimizer"]);
    assert_eq!(shown["format"], written["format"]);
}
