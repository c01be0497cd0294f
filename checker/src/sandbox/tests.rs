//! The sandbox's decisions, with stand-in bubblewraps (shell scripts that answer as an
//! older release does) and a distribution's files; and, where this machine can make a
//! sandbox, what the seccomp filter really stops.
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::host::Host;
use super::*;

fn sandbox() -> Sandbox {
    stand_in()
}

fn argv(cmd: &Command) -> Vec<String> {
    cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect()
}

fn has(args: &[String], seq: &[&str]) -> bool {
    args.windows(seq.len()).any(|w| w == seq)
}

/// A script at `dir/name` with `body`, executable.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A bubblewrap that calls itself `version`, refuses `unknown` as that release does
/// ("bwrap: Unknown option --size"), and then does `then` (`exit 0`: pretends the
/// sandbox ran; `exec /usr/bin/bwrap "$@"`: runs the real one).
fn fake_bwrap(dir: &Path, version: &str, unknown: &[&str], then: &str) -> PathBuf {
    let refused = if unknown.is_empty() { "--never-refused".to_string() } else { unknown.join("|") };
    script(
        dir,
        "bwrap",
        &format!(
            "if [ \"$1\" = --version ]; then echo \"bubblewrap {version}\"; exit 0; fi\n\
             for a in \"$@\"; do case \"$a\" in {refused}) echo \"bwrap: Unknown option $a\" >&2; exit 1;; esac; done\n\
             {then}"
        ),
    )
}

/// This machine's files, read as an ordinary user would be refused.
fn here() -> Host {
    Host::this_machine()
}

fn probe(bwrap: &Path, capping: Capping) -> Result<Sandbox, Unavailable> {
    Sandbox::probe_at(bwrap, &here(), Limits::default(), |_| capping, None)
}

#[test]
fn a_job_gets_every_namespace_no_capabilities_and_no_user_namespace_of_its_own() {
    let cmd = sandbox().command(Path::new("/bin/true"), &[], Path::new("/tmp"), &[], &[]);
    let args = argv(&cmd);
    for flag in ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--disable-userns"]
    {
        assert!(args.iter().any(|a| a == flag), "{flag} missing from {args:?}");
    }
    assert!(!args.iter().any(|a| a == "--share-net"), "the network must stay unshared");
    assert!(has(&args, &["--cap-drop", "ALL"]));
    assert!(!args.iter().any(|a| a == "--seccomp"), "bubblewrap 0.8 needs no filter: {args:?}");
    // Nothing of the grader's home or the repository unless named.
    assert!(!args.iter().any(|a| a == "/root" || a == "/home" || a == "/work"), "{args:?}");
}

#[test]
fn a_job_starts_from_an_empty_environment_on_every_bubblewrap() {
    // bwrap hands its own environment on (there is no --clearenv before 0.5.0): it gets none.
    let dir = tempfile::tempdir().unwrap();
    let mut s = sandbox();
    s.bwrap = script(dir.path(), "bwrap", "exec /usr/bin/env");
    let env = [("DDP_LAB_PASSED".to_string(), "1".to_string())];
    let out = s.command(Path::new("/bin/true"), &[], Path::new("/tmp"), &env, &[]).output().unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(!seen.contains("HOME=") && !seen.contains("CARGO"), "the grader's environment leaked: {seen}");
    assert!(has(
        &argv(&s.command(Path::new("/bin/true"), &[], Path::new("/tmp"), &env, &[])),
        &["--setenv", "DDP_LAB_PASSED", "1"]
    ));
}

#[test]
fn only_the_named_paths_are_writable_and_gpus_are_passed_as_devices() {
    let mounts = [
        Mount::ReadOnly("/data".into()),
        Mount::Writable("/target".into()),
        Mount::Device("/dev/nvidia0".into()),
        Mount::Scratch("/job".into(), 1024),
    ];
    let cmd = sandbox().command(Path::new("/bin/true"), &[], Path::new("/job"), &[], &mounts);
    let args = argv(&cmd);
    assert!(has(&args, &["--ro-bind-try", "/data", "/data"]));
    assert!(has(&args, &["--bind", "/target", "/target"]));
    assert!(has(&args, &["--dev-bind-try", "/dev/nvidia0", "/dev/nvidia0"]));
    assert!(has(&args, &["--size", "1024", "--tmpfs", "/job"]));
    let binds = args.windows(3).filter(|w| w[0] == "--bind").count();
    assert_eq!(binds, 1, "one writable bind, the one named: {args:?}");
}

#[test]
fn a_missing_bwrap_is_refused_with_the_fix() {
    let err = probe(Path::new("/nonexistent/bwrap"), Capping::Rlimits).unwrap_err();
    assert!(err.cause.contains("/nonexistent/bwrap"), "{}", err.cause);
    assert!(err.fix.contains("--unsandboxed"), "{}", err.fix);
}

#[test]
fn bubblewrap_0_8_gets_every_option_it_knows() {
    let dir = tempfile::tempdir().unwrap();
    let s = probe(&fake_bwrap(dir.path(), "0.8.0", &[], "exit 0"), Capping::Rlimits).unwrap();
    assert_eq!(s.version.as_deref(), Some("0.8.0"));
    assert_eq!(s.nested_userns, NestedUserns::Disabled);
    assert!(s.tmpfs_size);
    let args = argv(&s.command(
        Path::new("/bin/true"),
        &[],
        Path::new("/job"),
        &[],
        &[Mount::Scratch("/job".into(), 9)],
    ));
    assert!(
        has(&args, &["--size", "9", "--tmpfs", "/job"]) && args.contains(&"--disable-userns".to_string())
    );
}

#[test]
fn bubblewrap_0_7_has_the_seccomp_filter_stand_in_for_disable_userns() {
    let dir = tempfile::tempdir().unwrap();
    let s =
        probe(&fake_bwrap(dir.path(), "0.7.0", &["--disable-userns"], "exit 0"), Capping::Rlimits).unwrap();
    assert!(matches!(s.nested_userns, NestedUserns::Filtered(_)), "{:?}", s.nested_userns);
    let cmd = s.command(Path::new("/bin/true"), &[], Path::new("/tmp"), &[], &[]);
    let args = argv(&cmd);
    assert!(!args.contains(&"--disable-userns".to_string()), "{args:?}");
    let at = args.iter().position(|a| a == "--seccomp").expect("--seccomp FD");
    assert!(args[at + 1].parse::<i32>().is_ok_and(|fd| fd > 2), "{args:?}");
    assert!(at < args.iter().position(|a| a == "--").unwrap(), "an option of bwrap's, not of the program's");
    let described = s.describe().nested_user_namespaces;
    assert!(described.contains("seccomp filter") && described.contains("bubblewrap 0.7.0"), "{described}");
}

#[test]
fn bwrap_reads_the_whole_filter_from_its_descriptor_each_time() {
    // A bwrap that counts the bytes behind its --seccomp descriptor.
    let dir = tempfile::tempdir().unwrap();
    let mut s = sandbox();
    s.nested_userns = NestedUserns::Filtered(seccomp::filter().expect("x86_64 or aarch64"));
    s.bwrap = script(
        dir.path(),
        "bwrap",
        // bash's `<&N`, which shares the descriptor's offset (a filter read down to its
        // end once would read as 0 bytes the next time): dash takes one digit only, and
        // with other tests' files open the descriptor can be 10 or more.
        "while [ \"$1\" != --seccomp ]; do shift; done\nexec /bin/bash -c \"exec /usr/bin/wc -c <&$2\"",
    );
    let want = (seccomp::filter().unwrap().len() * 8).to_string();
    let mut cmd = s.command(Path::new("/bin/true"), &[], Path::new("/tmp"), &[], &[]);
    for _ in 0..2 {
        let out = cmd.output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "{:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn bubblewrap_0_6_is_refused_where_nothing_would_cap_its_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bwrap = fake_bwrap(dir.path(), "0.6.1", &["--size", "--disable-userns"], "exit 0");
    let why = probe(&bwrap, Capping::Rlimits).unwrap_err();
    assert!(why.cause.contains("bubblewrap 0.6.1 has no --size (added in bubblewrap 0.7.0)"), "{why}");
    assert!(why.cause.contains("fill this machine's memory"), "{why}");
    assert!(why.fix.contains("0.8.0 or later") && why.fix.contains("Ubuntu 24.04"), "{why}");
    assert!(why.fix.contains("systemd-run --user --scope"), "{why}");
    assert!(why.fix.contains("--unsandboxed"), "{why}");
}

#[test]
fn bubblewrap_0_6_runs_where_the_jobs_cgroup_caps_its_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bwrap = fake_bwrap(dir.path(), "0.6.1", &["--size", "--disable-userns"], "exit 0");
    let s = probe(&bwrap, Capping::CgroupV2).unwrap();
    assert!(!s.tmpfs_size);
    let args = argv(&s.command(
        Path::new("/bin/true"),
        &[],
        Path::new("/job"),
        &[],
        &[Mount::Scratch("/job".into(), 9)],
    ));
    assert!(!args.contains(&"--size".to_string()), "{args:?}");
    assert!(has(&args, &["--tmpfs", "/job"]));
    let described = s.describe();
    let space = &described.work_space;
    assert!(space.contains("job's memory limit") && space.contains("0.6.1"), "{described:?}");
}

#[test]
fn bubblewrap_0_6_runs_in_a_systemd_user_scope() {
    // A systemd-run that runs what follows `--` as the real one does in the scope.
    let dir = tempfile::tempdir().unwrap();
    // It fails unless the filter's descriptor came through systemd-run and the wrapper.
    let bwrap = fake_bwrap(
        dir.path(),
        "0.6.1",
        &["--size", "--disable-userns"],
        "prev=; for a in \"$@\"; do if [ \"$prev\" = --seccomp ] && [ ! -e \"/proc/self/fd/$a\" ]; then \
         echo \"bwrap: Can't read seccomp data\" >&2; exit 1; fi; prev=$a; done",
    );
    let systemd_run =
        script(dir.path(), "systemd-run", "while [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"");
    let s = Sandbox::probe_at(
        &bwrap,
        &here(),
        Limits::default(),
        |_| Capping::UserScope,
        Some(systemd_run.clone()),
    )
    .unwrap();
    assert_eq!(s.capping, Capping::UserScope);
    let cmd = s.command(Path::new("/bin/true"), &[], Path::new("/tmp"), &[], &[]);
    assert_eq!(cmd.get_program(), systemd_run.as_os_str());
    let args = argv(&cmd);
    assert!(has(&args, &["-p", "MemoryMax=6442450944"]) && has(&args, &["-p", "TasksMax=512"]), "{args:?}");
    // The build's scope drops its counters; a job's come back in its events file.
    let dash = args.iter().position(|a| a == "--").unwrap();
    assert_eq!(&args[dash + 1..dash + 3], ["/bin/sh", "-c"]);
    assert_eq!(args[dash + 5..dash + 7], ["/dev/null".to_string(), bwrap.display().to_string()]);
    let job = JobCgroup::create(Capping::UserScope, &s.limits).unwrap().unwrap();
    let JobCgroup::Scope { events } = &job else { panic!("a scope") };
    let cmd = s.job_command(Some(&job), Path::new("/bin/true"), &[], Path::new("/tmp"), &[], &[]).unwrap();
    assert_eq!(argv(&cmd)[dash + 5], events.display().to_string());
    assert!(s.describe().capping.contains("systemd user scope"));
    // Where systemd-run is gone, no scope is claimed.
    let s = Sandbox::probe_at(&bwrap, &here(), Limits::default(), |_| Capping::UserScope, None);
    assert!(s.is_err_and(|why| why.cause.contains("has no --size")), "rlimits cannot cap 0.6.1's tmpfs");
}

#[test]
fn a_bubblewrap_older_than_0_3_1_is_refused_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let bwrap = fake_bwrap(dir.path(), "0.3.0", &["--ro-bind-try", "--size", "--disable-userns"], "exit 0");
    let why = probe(&bwrap, Capping::CgroupV2).unwrap_err();
    assert!(why.cause.contains("bubblewrap 0.3.0"), "{why}");
    assert!(why.cause.contains("does not know --ro-bind-try (added in bubblewrap 0.3.1)"), "{why}");
    assert!(why.fix.contains("0.8.0 or later"), "{why}");
}

#[test]
fn refused_namespaces_get_the_fix_for_the_distribution() {
    let dir = tempfile::tempdir().unwrap();
    let said = "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.";
    let bwrap = script(
        dir.path(),
        "bwrap",
        &format!(
            "if [ \"$1\" = --version ]; then echo 'bubblewrap 0.8.0'; exit 0; fi\necho '{said}' >&2; exit 1"
        ),
    );
    let root = tempfile::tempdir().unwrap();
    for (path, text) in [
        ("etc/os-release", "PRETTY_NAME=\"Debian GNU/Linux 10 (buster)\"\nID=debian\n"),
        ("proc/sys/kernel/unprivileged_userns_clone", "0\n"),
    ] {
        std::fs::create_dir_all(root.path().join(path).parent().unwrap()).unwrap();
        std::fs::write(root.path().join(path), text).unwrap();
    }
    let host = Host::at(root.path(), 1000);
    let why = Sandbox::probe_at(&bwrap, &host, Limits::default(), |_| Capping::Rlimits, None).unwrap_err();
    assert!(why.cause.contains("Debian GNU/Linux 10") && why.cause.contains(said), "{why}");
    assert!(why.fix.contains("sysctl -w kernel.unprivileged_userns_clone=1"), "{why}");
}

#[test]
fn a_disable_userns_that_fails_here_is_stood_in_for_too() {
    // bubblewrap 0.8 in a container whose /proc/sys is read-only.
    let dir = tempfile::tempdir().unwrap();
    let bwrap = script(
        dir.path(),
        "bwrap",
        "if [ \"$1\" = --version ]; then echo 'bubblewrap 0.8.0'; exit 0; fi\n\
         for a in \"$@\"; do if [ \"$a\" = --disable-userns ]; then \
         echo 'bwrap: cannot open /proc/sys/user/max_user_namespaces: Read-only file system' >&2; exit 1; fi; done",
    );
    let s = probe(&bwrap, Capping::Rlimits).unwrap();
    assert!(matches!(s.nested_userns, NestedUserns::Filtered(_)));
}

#[test]
fn a_line_that_fails_only_with_the_filter_is_refused_not_run_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let bwrap = fake_bwrap(
        dir.path(),
        "0.7.0",
        &["--disable-userns"],
        "for a in \"$@\"; do if [ \"$a\" = --seccomp ]; then echo 'bwrap: prctl(PR_SET_SECCOMP): Invalid argument' >&2; exit 1; fi; done",
    );
    let why = probe(&bwrap, Capping::Rlimits).unwrap_err();
    assert!(why.cause.contains("bubblewrap 0.7.0 cannot run the sandbox's command line here"), "{why}");
    assert!(why.cause.contains("PR_SET_SECCOMP"), "{why}");
}

/// bubblewrap where this machine can make a sandbox with it.
fn real_bwrap() -> Option<PathBuf> {
    let bwrap = find_on_path("bwrap")?;
    let works = Command::new(&bwrap).args(bubblewrap::trying(&[])).output().is_ok_and(|o| o.status.success());
    if !works {
        assert!(
            std::env::var("DDP_LAB_REQUIRE_SANDBOX").is_err(),
            "DDP_LAB_REQUIRE_SANDBOX is set but bubblewrap cannot make a sandbox here"
        );
        eprintln!("skipped: bubblewrap cannot make a sandbox on this machine");
        return None;
    }
    Some(bwrap)
}

/// `program args` in `sandbox`: whether it succeeded, and what it printed.
fn run_in(sandbox: &Sandbox, program: &str, args: &[&str]) -> (bool, String) {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let mounts = [Mount::Scratch("/job".into(), 1 << 20)];
    let env = [("PATH".to_string(), "/usr/bin:/bin".to_string())];
    let out = sandbox.command(Path::new(program), &args, Path::new("/job"), &env, &mounts).output().unwrap();
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[test]
fn the_filter_stops_a_nested_user_namespace_for_real_and_lets_threads_run() {
    let Some(real) = real_bwrap() else { return };
    let dir = tempfile::tempdir().unwrap();
    // This machine's bubblewrap, made to answer as 0.7.0 does.
    let old =
        fake_bwrap(dir.path(), "0.7.0", &["--disable-userns"], &format!("exec {} \"$@\"", real.display()));
    let filtered = probe(&old, Capping::Rlimits).unwrap();
    assert!(matches!(filtered.nested_userns, NestedUserns::Filtered(_)));
    let unshare = "/usr/bin/unshare";
    if Path::new(unshare).exists() {
        let (ok, said) = run_in(&filtered, unshare, &["--user", "true"]);
        assert!(!ok && said.contains("Operation not permitted"), "a user namespace was made: {said}");
        // The same line without the filter makes one: the test sees the difference.
        let mut open = filtered.clone();
        open.nested_userns = NestedUserns::Allowed;
        let (ok, said) = run_in(&open, unshare, &["--user", "true"]);
        assert!(ok, "without the filter the namespace is made here: {said}");
    }
    let python = "/usr/bin/python3";
    if Path::new(python).exists() {
        // clone(CLONE_NEWUSER) straight, and clone3 (ENOSYS: glibc falls back for threads).
        let (clone, clone3) = (seccomp::this_arch().unwrap().clone, seccomp::this_arch().unwrap().clone3);
        let code = format!(
            "import ctypes, os, threading\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             r = libc.syscall({clone}, {flags}, 0, 0, 0, 0)\n\
             if r == 0: os._exit(0)\n\
             print('clone', r, ctypes.get_errno())\n\
             r = libc.syscall({clone3}, 0, 0)\n\
             print('clone3', r, ctypes.get_errno())\n\
             t = threading.Thread(target=print, args=('thread ran',)); t.start(); t.join()",
            flags = seccomp::CLONE_NEWUSER | libc::SIGCHLD as u32,
        );
        let (ok, said) = run_in(&filtered, python, &["-c", &code]);
        assert!(ok, "{said}");
        assert!(said.contains(&format!("clone -1 {}", libc::EPERM)), "{said}");
        assert!(said.contains(&format!("clone3 -1 {}", libc::ENOSYS)), "{said}");
        assert!(said.contains("thread ran"), "{said}");
    }
}

#[test]
fn a_user_scope_caps_a_real_job_and_its_verdict_says_out_of_memory() {
    let Some(real) = real_bwrap() else { return };
    let limits = Limits { memory: 64 << 20, ..Limits::default() };
    let systemd_run = find_on_path("systemd-run").filter(|s| limits::scope_works(s, &limits));
    let Some(systemd_run) = systemd_run else {
        eprintln!(
            "skipped: no systemd user manager here whose scopes get memory and tasks limits \
             (`systemd-run --user --scope -p MemoryMax=…` must work: a login session on cgroup v2)"
        );
        return;
    };
    let s = Sandbox::probe_at(&real, &here(), limits, |_| Capping::UserScope, Some(systemd_run)).unwrap();
    assert_eq!(s.capping, Capping::UserScope);
    let job = JobCgroup::create(s.capping, &s.limits).unwrap().unwrap();
    // 200 MB held in the shell's memory, in a job that may use 64 MiB.
    let hog: Vec<OsString> =
        ["-c", "a=$(head -c 200000000 /dev/zero | tr '\\0' x); echo survived"].map(OsString::from).to_vec();
    let env = [("PATH".to_string(), "/usr/bin:/bin".to_string())];
    let mounts = [Mount::Scratch("/job".into(), 1 << 20)];
    let mut cmd =
        s.job_command(Some(&job), Path::new("/bin/sh"), &hog, Path::new("/job"), &env, &mounts).unwrap();
    let out = cmd.output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("survived"), "the scope did not cap the job");
    assert!(job.limits_hit().out_of_memory, "the scope's counters did not come back: {out:?}");
}

#[test]
fn this_machines_bubblewrap_is_probed_for_the_options_it_knows() {
    let Some(real) = real_bwrap() else { return };
    let s = probe(&real, Capping::Rlimits).unwrap();
    let version = s.version.clone().expect("bwrap --version names one");
    let release: Vec<u32> = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    // What the option history says this release knows.
    assert_eq!(s.tmpfs_size, release >= vec![0, 7], "--size, bubblewrap {version}");
    assert_eq!(
        s.nested_userns == NestedUserns::Disabled,
        release >= vec![0, 8],
        "--disable-userns, bubblewrap {version}"
    );
    assert_eq!(s.describe().bubblewrap.version.as_deref(), Some(version.as_str()));
}
