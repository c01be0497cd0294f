//! `bookcheck SRC HTML`: checks the lab guide that mdBook built from `SRC` (the
//! directory holding SUMMARY.md) into `HTML`. Exit 0 when sound, 1 with one line per
//! problem otherwise, 2 on a usage error. `scripts/book.sh check` runs it.
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [src, html] = args.as_slice() else {
        eprintln!("usage: bookcheck SRC HTML  (e.g. bookcheck lab-guide/src target/book)");
        return ExitCode::from(2);
    };
    let (src, html) = (PathBuf::from(src), PathBuf::from(html));
    match bookcheck::check(&src, &html) {
        Err(e) => {
            eprintln!("bookcheck: {e}");
            ExitCode::from(2)
        }
        Ok(report) if report.problems.is_empty() => {
            println!(
                "bookcheck: {} pages, {} internal links and {} images all resolve; every page of {} is in SUMMARY.md",
                report.pages,
                report.links,
                report.images,
                src.display()
            );
            ExitCode::SUCCESS
        }
        Ok(report) => {
            for problem in &report.problems {
                eprintln!("bookcheck: {problem}");
            }
            eprintln!(
                "bookcheck: {} problem(s) in the book built into {}",
                report.problems.len(),
                html.display()
            );
            ExitCode::FAILURE
        }
    }
}
