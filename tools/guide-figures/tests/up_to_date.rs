//! The committed figures that show the library's behaviour are what the library draws
//! now: a change to the sampler or to DDP's bucketing fails here until the figure is
//! redrawn (`cargo run -p guide-figures`) and looked at.
#[test]
fn the_committed_figures_are_what_the_library_draws() {
    let dir = guide_figures::figures_dir();
    for (name, drawn) in guide_figures::generated().unwrap() {
        let path = dir.join(name);
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("cannot read {}: {e}; run `cargo run -p guide-figures`", path.display())
        });
        assert!(
            committed == drawn,
            "{} differs from what the library draws now: run `cargo run -p guide-figures`, look at the \
             figure, and commit it",
            path.display()
        );
    }
}
