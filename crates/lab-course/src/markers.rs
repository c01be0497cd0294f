//! The marker language of the master program.
//!
//! The master is the finished lab, a Rust program that compiles; directives in `//@`
//! comments mark what each step changed. A line whose trimmed text starts with `//@` is
//! a directive and is never emitted:
//!
//! ```text
//! //@ header   opens the header block: the master's own `//!` lines, replaced in
//!              every crate by that crate's header; `//@ end` closes it
//! //@ step N   opens a block owned by step N (0 to LAST_STEP); its first section is "new"
//! //@ todo     starts the block's "todo" section (optional)
//! //@ old      starts the block's "old" section (optional)
//! //@ end      closes the block
//! ```
//!
//! Sections go new, todo, old, each at most once; blocks nest inside any section. A
//! version emits a block's "new" section once step N is done; the starter of step N
//! emits "todo" then "old"; every other version emits "old".
//!
//! The finished lab (the solution of step 11) is exactly the master's live lines: those
//! in no todo or old section. Every other line is dead in the master and commented out
//! with `//|` after its indentation (`    //| report.print();`); a version that emits it
//! drops `//|` and one space after it. So rustfmt, clippy and rust-analyzer work on the
//! master as on any program, and a dead line left uncommented, or a live line commented
//! out with `//|`, is an error.
use std::borrow::Cow;

use crate::{CourseError, Version, STEPS};

/// What comments out a dead line of the master: a line in a todo or old section.
pub const DEAD: &str = "//|";

/// A line of the master, numbered from 1 as editors and error messages count, as a
/// version emits it (a dead line without its `//|`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<'a> {
    pub no: usize,
    pub text: Cow<'a, str>,
}

#[derive(Debug)]
pub enum Node<'a> {
    Text(Line<'a>),
    Block(Block<'a>),
    /// The header block, at its opening line: each version emits its own header here.
    Header(usize),
}

/// A `//@ step N` ... `//@ end` block; absent sections are empty.
#[derive(Debug)]
pub struct Block<'a> {
    pub step: u8,
    pub new: Vec<Node<'a>>,
    pub todo: Vec<Node<'a>>,
    pub old: Vec<Node<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    New,
    Todo,
    Old,
}

impl Section {
    fn name(self) -> &'static str {
        match self {
            Section::New => "step",
            Section::Todo => "todo",
            Section::Old => "old",
        }
    }
}

enum Directive {
    Header,
    Step(u8),
    Todo,
    Old,
    End,
}

/// The directive on a line, if it is one.
fn directive(no: usize, text: &str) -> Result<Option<Directive>, CourseError> {
    let Some(rest) = text.trim().strip_prefix("//@") else { return Ok(None) };
    let words: Vec<&str> = rest.split_whitespace().collect();
    let directive = match words.as_slice() {
        ["header"] => Directive::Header,
        ["step", n] => match n.parse::<u8>() {
            Ok(step) if usize::from(step) < STEPS.len() => Directive::Step(step),
            _ => return Err(CourseError::BadStep { line: no, found: n.to_string() }),
        },
        ["step"] => return Err(CourseError::BadStep { line: no, found: String::new() }),
        ["todo"] => Directive::Todo,
        ["old"] => Directive::Old,
        ["end"] => Directive::End,
        _ => return Err(CourseError::UnknownDirective { line: no, text: text.trim().to_string() }),
    };
    Ok(Some(directive))
}

/// A block still being read: what has been parsed so far and where it stands.
struct Open<'a> {
    block: Block<'a>,
    opened: usize,
    section: Section,
    todo_line: usize,
}

impl<'a> Open<'a> {
    fn nodes(&mut self) -> &mut Vec<Node<'a>> {
        match self.section {
            Section::New => &mut self.block.new,
            Section::Todo => &mut self.block.todo,
            Section::Old => &mut self.block.old,
        }
    }

    /// Moves on to `next`, which must come later than the current section.
    fn enter(&mut self, next: Section, line: usize) -> Result<(), CourseError> {
        let step = self.block.step;
        if self.section == next {
            return Err(CourseError::RepeatedSection { line, step, section: next.name() });
        }
        if self.section == Section::Old {
            return Err(CourseError::SectionOrder { line, step, section: next.name(), after: "old" });
        }
        if next == Section::Todo {
            self.todo_line = line;
        }
        self.section = next;
        Ok(())
    }
}

/// A line as the versions emit it: a live line as it stands, a dead line (in a todo or
/// old section of some open block) without its `//|` and the one space after it.
fn text_line(no: usize, text: &str, dead: Option<u8>) -> Result<Line<'_>, CourseError> {
    let body = text.trim_start();
    let indent = &text[..text.len() - body.len()];
    match (dead, body.strip_prefix(DEAD)) {
        // Blank lines need no prefix: rustfmt keeps them as they are.
        (_, None) if body.is_empty() => Ok(Line { no, text: Cow::Borrowed(text) }),
        (None, None) => Ok(Line { no, text: Cow::Borrowed(text) }),
        (None, Some(_)) => Err(CourseError::CommentedLive { line: no }),
        (Some(step), None) => Err(CourseError::LiveDead { line: no, step }),
        (Some(_), Some(rest)) => {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            Ok(Line {
                no,
                text: if rest.is_empty() { Cow::Borrowed("") } else { format!("{indent}{rest}").into() },
            })
        }
    }
}

/// Parses the master into its top-level nodes.
pub fn parse(master: &str) -> Result<Vec<Node<'_>>, CourseError> {
    let mut root = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    // The header block's opening line while it is open; its lines are the master's own.
    let mut header: Option<usize> = None;
    for (i, text) in master.lines().enumerate() {
        let no = i + 1;
        let directive = directive(no, text)?;
        if let Some(opened) = header {
            match directive {
                Some(Directive::End) => header = None,
                Some(_) => return Err(CourseError::DirectiveInHeader { line: no, opened }),
                None => {}
            }
            continue;
        }
        match directive {
            None => {
                // The innermost block in a todo or old section makes the line dead.
                let dead = stack.iter().rev().find(|open| open.section != Section::New).map(|o| o.block.step);
                let line = text_line(no, text, dead)?;
                let nodes = match stack.last_mut() {
                    Some(open) => open.nodes(),
                    None => &mut root,
                };
                nodes.push(Node::Text(line));
            }
            Some(Directive::Header) => {
                if !stack.is_empty() || root.iter().any(|n| matches!(n, Node::Header(_))) {
                    return Err(CourseError::MisplacedHeader { line: no });
                }
                header = Some(no);
                root.push(Node::Header(no));
            }
            Some(Directive::Step(step)) => stack.push(Open {
                block: Block { step, new: Vec::new(), todo: Vec::new(), old: Vec::new() },
                opened: no,
                section: Section::New,
                todo_line: 0,
            }),
            Some(Directive::Todo) => {
                let open =
                    stack.last_mut().ok_or(CourseError::NoOpenBlock { line: no, directive: "todo" })?;
                open.enter(Section::Todo, no)?;
            }
            Some(Directive::Old) => {
                let open = stack.last_mut().ok_or(CourseError::NoOpenBlock { line: no, directive: "old" })?;
                open.enter(Section::Old, no)?;
            }
            Some(Directive::End) => {
                let open = stack.pop().ok_or(CourseError::NoOpenBlock { line: no, directive: "end" })?;
                let step = open.block.step;
                // A todo section is the starter's pointer to the work: it must say so.
                if open.todo_line != 0 && !mentions_todo(&open.block.todo, step) {
                    return Err(CourseError::TodoWithoutMarker { line: open.todo_line, step });
                }
                let nodes = match stack.last_mut() {
                    Some(parent) => parent.nodes(),
                    None => &mut root,
                };
                nodes.push(Node::Block(open.block));
            }
        }
    }
    if let Some(line) = header {
        return Err(CourseError::UnclosedHeader { line });
    }
    match stack.pop() {
        Some(open) => Err(CourseError::Unclosed { line: open.opened, step: open.block.step }),
        None => Ok(root),
    }
}

/// Whether any line in `nodes`, nested blocks included, carries `TODO Step {step}`.
fn mentions_todo(nodes: &[Node], step: u8) -> bool {
    nodes.iter().any(|node| match node {
        Node::Text(line) => has_todo_marker(&line.text, step),
        Node::Block(b) => [&b.new, &b.todo, &b.old].into_iter().any(|n| mentions_todo(n, step)),
        Node::Header(_) => false,
    })
}

/// Whether `text` contains `TODO Step {step}` with exactly that number, so that
/// `TODO Step 10` does not count for step 1.
pub fn has_todo_marker(text: &str, step: u8) -> bool {
    const TAG: &str = "TODO Step ";
    let want = step.to_string();
    text.match_indices(TAG).any(|(at, _)| {
        let rest = &text[at + TAG.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest[..digits] == want
    })
}

/// What a version emits: a line, or its header where the master has the header block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Emitted<'a> {
    Line(Line<'a>),
    Header,
}

/// The lines `version` emits, in order, the header block aside.
pub fn select<'a>(nodes: &'a [Node<'a>], version: Version) -> Vec<Line<'a>> {
    emit(nodes, version)
        .into_iter()
        .filter_map(|e| match e {
            Emitted::Line(line) => Some(line),
            Emitted::Header => None,
        })
        .collect()
}

/// The code step `step` adds, block by block: every line of each of its blocks' "new"
/// section as its solution emits it (blocks of other steps nested there resolved as in
/// that solution), in the master's order. What a hint or a students' copy must not give
/// away before it is asked.
pub fn step_code<'a>(nodes: &'a [Node<'a>], step: u8) -> Vec<Vec<Line<'a>>> {
    let mut out = Vec::new();
    step_code_into(nodes, step, &mut out);
    out
}

fn step_code_into<'a>(nodes: &'a [Node<'a>], step: u8, out: &mut Vec<Vec<Line<'a>>>) {
    for node in nodes {
        if let Node::Block(block) = node {
            if block.step == step {
                out.push(select(&block.new, Version::Solution(step)));
            } else {
                for section in [&block.new, &block.todo, &block.old] {
                    step_code_into(section, step, out);
                }
            }
        }
    }
}

/// Everything `version` emits, in order.
pub fn emit<'a>(nodes: &'a [Node<'a>], version: Version) -> Vec<Emitted<'a>> {
    let mut out = Vec::new();
    emit_into(nodes, version, &mut out);
    out
}

fn emit_into<'a>(nodes: &'a [Node<'a>], version: Version, out: &mut Vec<Emitted<'a>>) {
    for node in nodes {
        match node {
            Node::Text(line) => out.push(Emitted::Line(line.clone())),
            Node::Header(_) => out.push(Emitted::Header),
            Node::Block(block) if version.is_done(block.step) => emit_into(&block.new, version, out),
            Node::Block(block) => {
                if version.todo() == Some(block.step) {
                    emit_into(&block.todo, version, out);
                }
                emit_into(&block.old, version, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{render_main, LAST_STEP};
    use Version::{Solution, Starter};

    fn render(master: &str, version: Version) -> String {
        render_main(master, version).unwrap_or_else(|e| panic!("{e}"))
    }

    /// What `version` emits, without render_main's checks (starters of steps that
    /// have no todo section fail those).
    fn emitted(master: &str, version: Version) -> String {
        select(&parse(master).unwrap(), version).iter().map(|l| format!("{}\n", l.text)).collect()
    }

    fn error(master: &str) -> CourseError {
        match parse(master) {
            Ok(_) => panic!("expected an error for:\n{master}"),
            Err(e) => e,
        }
    }

    const THREE: &str = "\
a
//@ step 3
new3
//@ todo
//| // TODO Step 3: do it
//@ old
//| old3
//@ end
z
";

    #[test]
    fn selects_new_todo_or_old_by_version() {
        assert_eq!(emitted(THREE, Starter(2)), "a\nold3\nz\n");
        assert_eq!(emitted(THREE, Solution(2)), "a\nold3\nz\n");
        assert_eq!(emitted(THREE, Starter(3)), "a\n// TODO Step 3: do it\nold3\nz\n");
        assert_eq!(emitted(THREE, Solution(3)), "a\nnew3\nz\n");
        assert_eq!(emitted(THREE, Starter(4)), "a\nnew3\nz\n");
        assert_eq!(emitted(THREE, Solution(LAST_STEP)), "a\nnew3\nz\n");
    }

    #[test]
    fn blocks_without_old_or_todo_emit_nothing_before_their_step() {
        let master = "//@ step 5\nnew5\n//@ end\n";
        let tree = parse(master).unwrap();
        let texts = |v| select(&tree, v).into_iter().map(|l| l.text).collect::<Vec<_>>();
        assert!(texts(Solution(4)).is_empty());
        assert!(texts(Starter(5)).is_empty());
        assert_eq!(texts(Solution(5)), ["new5"]);
        assert_eq!(texts(Starter(6)), ["new5"]);
    }

    #[test]
    fn blocks_nest_in_every_section() {
        let master = "\
//@ step 2
n2
//@ step 4
n2n4
//@ old
//| n2o4
//@ end
//@ todo
//| // TODO Step 2
//@ step 0
//| t2n0
//@ end
//@ old
//| o2
//@ step 1
//| o2n1
//@ old
//| o2o1
//@ end
//@ end
";
        let tree = parse(master).unwrap();
        let lines = |v| select(&tree, v).into_iter().map(|l| l.text).collect::<Vec<_>>();
        assert_eq!(lines(Starter(0)), ["o2", "o2o1"]);
        assert_eq!(lines(Starter(1)), ["o2", "o2o1"]);
        assert_eq!(lines(Solution(1)), ["o2", "o2n1"]);
        assert_eq!(lines(Starter(2)), ["// TODO Step 2", "t2n0", "o2", "o2n1"]);
        assert_eq!(lines(Solution(2)), ["n2", "n2o4"]);
        assert_eq!(lines(Starter(4)), ["n2", "n2o4"]);
        assert_eq!(lines(Solution(4)), ["n2", "n2n4"]);
    }

    #[test]
    fn lines_keep_their_master_line_numbers() {
        let tree = parse(THREE).unwrap();
        let numbers: Vec<usize> = select(&tree, Starter(3)).iter().map(|l| l.no).collect();
        assert_eq!(numbers, [1, 5, 7, 9]);
    }

    #[test]
    fn directives_may_be_indented_and_are_never_emitted() {
        let master = "fn f() {\n    //@ step 0\n    x();\n    //@ end\n}\n";
        assert_eq!(render(master, Solution(0)), "fn f() {\n    x();\n}\n");
    }

    #[test]
    fn header_names_the_step_and_the_checker() {
        let master =
            "//@ header\n//! The master's own.\n//@ end\n//@ step 7\n//@ todo\n//| // TODO Step 7\n//@ end\n";
        let starter = render(master, Starter(7));
        assert!(
            starter.starts_with("//! ddp-lab, step 7: one device per rank, and the model wrapped in DDP.\n")
        );
        assert!(
            starter.contains("`cargo checker verify step 7`")
                && starter.contains("`cargo checker hint step 7`"),
            "{starter}"
        );
        let solution = render(master, Solution(7));
        assert!(solution.starts_with("//! ddp-lab, solution of step 7: one device per rank"));
        assert!(!solution.contains("finished lab"));
        assert!(render(master, Solution(crate::LAB_LAST_STEP)).contains("This is the finished lab"));
    }

    #[test]
    fn todo_markers_match_the_whole_number() {
        assert!(has_todo_marker("// TODO Step 1: x", 1));
        assert!(has_todo_marker("x // TODO Step 10", 10));
        assert!(!has_todo_marker("// TODO Step 10", 1));
        assert!(!has_todo_marker("// TODO Step 1", 10));
        assert!(!has_todo_marker("// TODO Step 07", 7));
        assert!(has_todo_marker("TODO Step 2 and TODO Step 3", 3));
    }

    #[test]
    fn unknown_directives_are_rejected() {
        for bad in ["//@ stpe 3", "//@", "//@ end 3", "//@ todo now"] {
            let e = error(&format!("a\n{bad}\n"));
            assert!(matches!(e, CourseError::UnknownDirective { line: 2, .. }), "{bad}: {e:?}");
        }
    }

    #[test]
    fn bad_step_numbers_are_rejected() {
        let after_the_last = format!("//@ step {}", LAST_STEP + 1);
        for bad in [&*after_the_last, "//@ step x", "//@ step -1", "//@ step"] {
            let e = error(&format!("\n\n{bad}\n//@ end\n"));
            assert!(matches!(e, CourseError::BadStep { line: 3, .. }), "{bad}: {e:?}");
        }
        let message = error(&format!("{after_the_last}\n//@ end\n")).to_string();
        assert!(message.contains(&format!("from 0 to {LAST_STEP}")), "{message}");
    }

    #[test]
    fn sections_need_an_open_block() {
        for (directive, name) in [("//@ todo", "todo"), ("//@ old", "old"), ("//@ end", "end")] {
            let e = error(&format!("//@ step 0\n//@ end\n{directive}\n"));
            match e {
                CourseError::NoOpenBlock { line: 3, directive } => assert_eq!(directive, name),
                e => panic!("{name}: {e:?}"),
            }
        }
    }

    #[test]
    fn sections_go_in_order_once_each() {
        let e = error("//@ step 1\n//@ old\n//@ todo\n//| // TODO Step 1\n//@ end\n");
        assert!(matches!(e, CourseError::SectionOrder { line: 3, step: 1, section: "todo", after: "old" }));
        let e = error("//@ step 1\n//@ todo\n//| // TODO Step 1\n//@ todo\n//@ end\n");
        assert!(matches!(e, CourseError::RepeatedSection { line: 4, step: 1, section: "todo" }));
        let e = error("//@ step 1\n//@ old\n//@ old\n//@ end\n");
        assert!(matches!(e, CourseError::RepeatedSection { line: 3, step: 1, section: "old" }));
        // The rules are per block: an inner block has its own sections.
        parse("//@ step 1\n//@ old\n//@ step 2\n//@ old\n//@ end\n//@ end\n").unwrap();
    }

    #[test]
    fn unclosed_blocks_name_their_opening_line() {
        let e = error("a\n//@ step 4\nb\n");
        assert!(matches!(e, CourseError::Unclosed { line: 2, step: 4 }), "{e:?}");
        let e = error("//@ step 4\n//@ step 5\n//@ end\n");
        assert!(matches!(e, CourseError::Unclosed { line: 1, step: 4 }), "{e:?}");
    }

    #[test]
    fn todo_sections_must_carry_their_own_marker() {
        let e =
            error("//@ step 1\nx\n//@ todo\n//| // TODO: something\n//@ old\n//| // TODO Step 1\n//@ end\n");
        assert!(matches!(e, CourseError::TodoWithoutMarker { line: 3, step: 1 }), "{e:?}");
        let e = error("//@ step 1\n//@ todo\n//| // TODO Step 10\n//@ end\n");
        assert!(matches!(e, CourseError::TodoWithoutMarker { line: 2, step: 1 }), "{e:?}");
        // A marker inside a block nested in the todo section counts.
        parse("//@ step 1\n//@ todo\n//@ step 0\n//| // TODO Step 1\n//@ end\n//@ end\n").unwrap();
    }

    #[test]
    fn starters_must_show_their_todo() {
        let master = "//@ step 4\nx\n//@ end\n";
        let e = render_main(master, Starter(4)).unwrap_err();
        assert!(matches!(e, CourseError::MissingTodo { step: 4, .. }), "{e:?}");
        assert!(e.to_string().starts_with("steps/step_04:"), "{e}");
        render_main(master, Solution(4)).unwrap();
        // The header mentions `TODO Step N` itself, which must not count.
        let e = render_main("//@ header\n//@ end\n", Starter(0)).unwrap_err();
        assert!(matches!(e, CourseError::MissingTodo { step: 0, .. }), "{e:?}");
    }

    #[test]
    fn leftover_markers_are_rejected() {
        let e = render_main("a\nlet x = 1; //@ step 3\n", Solution(0)).unwrap_err();
        assert!(matches!(e, CourseError::Leftover { line: 2, marker: "//@", .. }), "{e:?}");
        let e = render_main("a\nb\n  {{name}}\n", Solution(0)).unwrap_err();
        assert!(matches!(e, CourseError::Leftover { line: 3, marker: "{{", .. }), "{e:?}");
        // Only in what is emitted: a leftover in a section this version skips is fine.
        render_main("//@ step 3\n{{oops}}\n//@ end\n", Solution(0)).unwrap();
    }

    #[test]
    fn manifests_get_name_and_description_in_package_only() {
        let template = "# made by coursegen\n[package]\nname = \"{{name}}\"\ndescription = \"{{description}}\" # why\n\n[[bin]]\nname = \"kept\"\n";
        let manifest = crate::render_manifest(template, Solution(1)).unwrap();
        assert_eq!(
            manifest,
            "# made by coursegen\n[package]\nname = \"solution_01\"\n\
             description = \"ddp-lab step 1 solution: the --num-nodes, --num-gpus and --node-id options\" # why\n\n\
             [[bin]]\nname = \"kept\"\n"
        );
        let e = crate::render_manifest(
            "[package]\nname = \"\"\ndescription = \"\"\nversion = \"{{version}}\"\n",
            Starter(0),
        )
        .unwrap_err();
        assert!(matches!(e, CourseError::Leftover { line: 4, marker: "{{", .. }), "{e:?}");
        // A binary named `{{name}}` is named as the package; its other keys stay.
        let template = "[package]\nname = \"{{name}}\"\ndescription = \"{{description}}\"\n\n[[bin]]\nname = \"{{name}}\"\ntest = false\n";
        let manifest = crate::render_manifest(template, Starter(7)).unwrap();
        assert!(manifest.ends_with("[[bin]]\nname = \"step_07\"\ntest = false\n"), "{manifest}");
    }

    #[test]
    fn a_manifest_template_that_cargo_could_not_read_is_an_error() {
        for (template, why) in [
            ("[package\nname = \"{{name}}\"\n", "not valid TOML"),
            ("name = \"{{name}}\"\n", "no [package] table"),
            ("[package]\nname = \"{{name}}\"\n", "no `description = \"{{description}}\"` line"),
        ] {
            let e = crate::render_manifest(template, Starter(3)).unwrap_err();
            assert!(matches!(e, CourseError::ManifestTemplate { .. }), "{e:?}");
            let message = e.to_string();
            assert!(message.starts_with("course/lab/Cargo.toml.in: ") && message.contains(why), "{message}");
        }
    }

    #[test]
    fn versions_outside_the_lab_are_rejected() {
        let e = render_main("a\n", Solution(LAST_STEP + 1)).unwrap_err();
        assert!(matches!(e, CourseError::NoSuchStep { step } if step == LAST_STEP + 1), "{e:?}");
    }

    #[test]
    fn dead_lines_are_commented_out_in_the_master_and_emitted_without_the_prefix() {
        let master = "\
fn f() {
    //@ step 1
    y();
    //@ todo
    //| // TODO Step 1: y
    //@ old
    //| if a {
    //|     x();
    //|

    //|}
    //@ end
}
";
        assert_eq!(render(master, Solution(0)), "fn f() {\n    if a {\n        x();\n\n\n    }\n}\n");
        assert_eq!(
            emitted(master, Starter(1)),
            "fn f() {\n    // TODO Step 1: y\n    if a {\n        x();\n\n\n    }\n}\n"
        );
        assert_eq!(render(master, Solution(1)), "fn f() {\n    y();\n}\n");
        // A new section inside an old one is dead too: the finished lab does not hold it.
        let nested = "//@ step 5\n//@ old\n//@ step 2\n//| n2\n//@ old\n//| o2\n//@ end\n//@ end\n";
        assert_eq!(emitted(nested, Solution(2)), "n2\n");
        assert_eq!(emitted(nested, Solution(5)), "");
    }

    #[test]
    fn dead_lines_left_live_and_live_lines_commented_out_are_rejected() {
        let e = error("//@ step 2\nx\n//@ old\n    y();\n//@ end\n");
        assert!(matches!(e, CourseError::LiveDead { line: 4, step: 2 }), "{e:?}");
        assert!(e.to_string().contains("`//| ...`"), "{e}");
        let e = error("//@ step 2\n//@ todo\n//| // TODO Step 2\n//@ step 3\nnew3\n//@ end\n//@ end\n");
        assert!(matches!(e, CourseError::LiveDead { line: 5, step: 2 }), "{e:?}");
        let e = error("a\n//@ step 2\n    //| b\n//@ end\n");
        assert!(matches!(e, CourseError::CommentedLive { line: 3 }), "{e:?}");
        // A dead line commented out twice would leave `//|` in the crate.
        let e = render_main("//@ step 2\n//@ old\n//| //| x\n//@ end\n", Solution(0)).unwrap_err();
        assert!(matches!(e, CourseError::Leftover { line: 3, marker: "//|", .. }), "{e:?}");
    }

    #[test]
    fn the_header_block_is_the_masters_own_and_each_crate_gets_its_header_there() {
        let master = "//@ header\n//! Only in the master.\nnot code either\n//@ end\nfn main() {}\n";
        let solution = render(master, Solution(3));
        assert!(solution.starts_with("//! ddp-lab, solution of step 3"), "{solution}");
        assert!(solution.ends_with("\nfn main() {}\n") && !solution.contains("Only in the master"));
        let e = error("//@ step 1\n//@ header\n//@ end\n//@ end\n");
        assert!(matches!(e, CourseError::MisplacedHeader { line: 2 }), "{e:?}");
        let e = error("//@ header\n//@ end\n//@ header\n//@ end\n");
        assert!(matches!(e, CourseError::MisplacedHeader { line: 3 }), "{e:?}");
        let e = error("//@ header\n//@ step 1\n//@ end\n");
        assert!(matches!(e, CourseError::DirectiveInHeader { line: 2, opened: 1 }), "{e:?}");
        let e = error("a\n//@ header\n//! x\n");
        assert!(matches!(e, CourseError::UnclosedHeader { line: 2 }), "{e:?}");
    }
}
