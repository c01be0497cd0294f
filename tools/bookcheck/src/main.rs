//! `bookcheck SRC HTML [FILE.md ...]`: checks the lab guide that mdBook built from `SRC`
//! (the directory holding SUMMARY.md) into `HTML`, and the links of each Markdown `FILE`
//! of the repository outside the book (the README) into the repository, whose root is
//! the current directory, and into the built book. Exit 0 when sound, 1 with one line
//! per problem otherwise, 2 on a usage error. `scripts/book.sh check` runs it.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [src, html, files @ ..] = args.as_slice() else {
        eprintln!(
            "usage: bookcheck SRC HTML [FILE.md ...]  (e.g. bookcheck lab-guide/src target/book README.md)"
        );
        return ExitCode::from(2);
    };
    let (src, html) = (PathBuf::from(src), PathBuf::from(html));
    let mut report = match bookcheck::check(&src, &html) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("bookcheck: {e}");
            return ExitCode::from(2);
        }
    };
    for file in files {
        match bookcheck::check_repository_file(Path::new(file), Path::new("."), &src, &html) {
            Ok(problems) => report.problems.extend(problems),
            Err(e) => {
                eprintln!("bookcheck: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if report.problems.is_empty() {
        let also = if files.is_empty() {
            String::new()
        } else {
            format!("; so do the links of {}", files.join(", "))
        };
        println!(
            "bookcheck: {} pages, {} internal links and {} images all resolve; every page of {} is in SUMMARY.md{also}",
            report.pages,
            report.links,
            report.images,
            src.display()
        );
        return ExitCode::SUCCESS;
    }
    for problem in &report.problems {
        eprintln!("bookcheck: {problem}");
    }
    let also =
        if files.is_empty() { String::new() } else { format!(" or in the links of {}", files.join(", ")) };
    eprintln!(
        "bookcheck: {} problem(s) in the book built into {}{also}",
        report.problems.len(),
        html.display()
    );
    ExitCode::FAILURE
}
