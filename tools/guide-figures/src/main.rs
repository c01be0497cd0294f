//! `cargo run -p guide-figures`: redraws the guide's generated figures into
//! `lab-guide/src/figures/` (see the library's documentation). `--check` writes nothing
//! and exits 1 when a committed figure differs from what would be drawn.
use std::process::ExitCode;

fn main() -> ExitCode {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(_) => {
            eprintln!("usage: cargo run -p guide-figures [-- --check]");
            return ExitCode::from(2);
        }
    };
    let figures = match guide_figures::generated() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("guide-figures: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dir = guide_figures::figures_dir();
    let mut stale = 0;
    for (name, text) in figures {
        let path = dir.join(name);
        let same = std::fs::read_to_string(&path).is_ok_and(|old| old == text);
        if same {
            println!("guide-figures: {} is up to date", path.display());
        } else if check {
            eprintln!("guide-figures: {} differs from what the library draws now", path.display());
            stale += 1;
        } else if let Err(e) = std::fs::write(&path, text) {
            eprintln!("guide-figures: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        } else {
            println!("guide-figures: redrew {}", path.display());
        }
    }
    if stale > 0 {
        eprintln!("guide-figures: run `cargo run -p guide-figures` to redraw, and look at the result");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
