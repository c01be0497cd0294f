//! `coursegen`'s own part: scaffolding a new step. The course it renders (its steps,
//! the master's language, the crates' files) is the `lab-course` library.
pub mod new_step;
