//! Why bubblewrap could not make its namespaces on this machine, and the fix for the
//! distribution in use, decided from what the machine says: `/etc/os-release`, the
//! sysctls under `/proc/sys`, the signs of a container. Everything is read under a
//! root directory, so tests hand in a distribution's files.
use std::path::{Path, PathBuf};

use super::Unavailable;

/// The machine as read from the files under `root` (`/` but in tests).
pub struct Host {
    root: PathBuf,
    /// The effective user id: a restriction of *unprivileged* user namespaces does not
    /// bind root.
    euid: u32,
}

const UNSANDBOXED: &str = "or pass --unsandboxed to run the submitted code with all of your rights";

impl Host {
    /// This machine.
    pub fn this_machine() -> Host {
        // SAFETY: geteuid cannot fail.
        Host { root: PathBuf::from("/"), euid: unsafe { libc::geteuid() } }
    }

    /// The machine whose files are under `root`, as user `euid`.
    #[cfg(test)]
    pub fn at(root: &Path, euid: u32) -> Host {
        Host { root: root.to_path_buf(), euid }
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(path.trim_start_matches('/'))).ok()
    }

    /// A sysctl's value (`kernel.unprivileged_userns_clone`), where the kernel has it.
    fn sysctl(&self, name: &str) -> Option<i64> {
        self.read(&format!("proc/sys/{}", name.replace('.', "/")))?.trim().parse().ok()
    }

    /// A field of os-release (`ID`, `PRETTY_NAME`), unquoted.
    fn os_release(&self, key: &str) -> Option<String> {
        let text = self.read("etc/os-release").or_else(|| self.read("usr/lib/os-release"))?;
        text.lines()
            .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(|v| v.trim().trim_matches('"').trim_matches('\'').to_string())
            .next()
    }

    /// "Ubuntu 24.04.1 LTS", or "this Linux" where os-release says nothing.
    pub fn distribution(&self) -> String {
        self.os_release("PRETTY_NAME").unwrap_or_else(|| "this Linux".into())
    }

    /// Whether os-release names `id` as the distribution or one it is like.
    fn is_like(&self, id: &str) -> bool {
        let mut ids = self.os_release("ID").into_iter().chain(self.os_release("ID_LIKE"));
        ids.any(|v| v.split_whitespace().any(|w| w == id))
    }

    /// The sign that this runs in a container, as found.
    fn container(&self) -> Option<String> {
        if self.read(".dockerenv").is_some() {
            return Some("a Docker container (/.dockerenv)".into());
        }
        if self.read("run/.containerenv").is_some() {
            return Some("a Podman container (/run/.containerenv)".into());
        }
        let cgroup = self.read("proc/1/cgroup").unwrap_or_default();
        ["docker", "kubepods", "containerd", "lxc"]
            .iter()
            .find(|w| cgroup.contains(*w))
            .map(|w| format!("a container (/proc/1/cgroup names {w})"))
    }

    /// Whether this process already runs under a seccomp filter (a container's profile).
    fn filtered(&self) -> bool {
        let status = self.read("proc/self/status").unwrap_or_default();
        status.lines().any(|l| l.strip_prefix("Seccomp:").is_some_and(|v| v.trim() == "2"))
    }

    /// Why `bwrap` (which said `said`) cannot make a sandbox here, and the fix.
    pub fn no_namespaces(&self, bwrap: &Path, said: &str) -> Unavailable {
        let said = said.trim();
        let words = if said.is_empty() { String::new() } else { format!(" (bubblewrap said: {said})") };
        let unprivileged = self.euid != 0;
        let persist = |setting: &str| {
            format!(
                "as root, `sysctl -w {setting}`, and to keep it after a reboot \
                 `echo {setting} > /etc/sysctl.d/60-bubblewrap.conf`"
            )
        };
        if self.sysctl("user.max_user_namespaces") == Some(0) {
            return Unavailable {
                cause: format!(
                    "user namespaces are switched off on {} (user.max_user_namespaces = 0){words}",
                    self.distribution()
                ),
                fix: format!("{}; {UNSANDBOXED}", persist("user.max_user_namespaces=15000")),
            };
        }
        if self.read("sys/module/user_namespace/parameters/enable").is_some_and(|v| v.trim() == "N") {
            return Unavailable {
                cause: format!(
                    "the kernel of {} has user namespaces off (user_namespace.enable=N){words}",
                    self.distribution()
                ),
                fix: format!(
                    "add `user_namespace.enable=1` to the kernel's command line and reboot; {UNSANDBOXED}"
                ),
            };
        }
        if unprivileged && self.sysctl("kernel.unprivileged_userns_clone") == Some(0) {
            // Debian's own switch (also in Ubuntu's kernels), off by default before Debian 11.
            return Unavailable {
                cause: format!(
                    "{} forbids user namespaces to unprivileged users (kernel.unprivileged_userns_clone = 0){words}",
                    self.distribution()
                ),
                fix: format!("{}; {UNSANDBOXED}", persist("kernel.unprivileged_userns_clone=1")),
            };
        }
        if unprivileged && self.sysctl("kernel.apparmor_restrict_unprivileged_userns") == Some(1) {
            // Ubuntu 23.10 and later: a user namespace is only for programs whose AppArmor
            // profile allows `userns` (https://ubuntu.com/blog/ubuntu-23-10-restricted-unprivileged-user-namespaces).
            let bwrap = bwrap.canonicalize().unwrap_or_else(|_| bwrap.to_path_buf());
            let bwrap = bwrap.display();
            return Unavailable {
                cause: format!(
                    "{} restricts unprivileged user namespaces through AppArmor \
                     (kernel.apparmor_restrict_unprivileged_userns = 1) and no AppArmor profile \
                     allows them to {bwrap}{words}",
                    self.distribution()
                ),
                fix: format!(
                    "give bubblewrap a profile that allows user namespaces, as Ubuntu documents: \
                     `printf 'abi <abi/4.0>,\\ninclude <tunables/global>\\nprofile ddp-lab-bwrap {bwrap} \
                     flags=(unconfined) {{\\n  userns,\\n}}\\n' | sudo tee /etc/apparmor.d/ddp-lab-bwrap` \
                     then `sudo apparmor_parser -r /etc/apparmor.d/ddp-lab-bwrap`; or lift the restriction \
                     for the whole machine: {}; {UNSANDBOXED}",
                    persist("kernel.apparmor_restrict_unprivileged_userns=0")
                ),
            };
        }
        if let Some(container) = self.container() {
            let seccomp = if self.filtered() { ", under a seccomp filter" } else { "" };
            // Docker's default seccomp profile refuses the namespace calls, and its masked
            // /proc paths stop a fresh /proc being mounted (containers/bubblewrap#284;
            // `systempaths=unconfined` is docker/cli#1808).
            return Unavailable {
                cause: format!("bubblewrap cannot make its namespaces inside {container}{seccomp}{words}"),
                fix: "start the container with `--security-opt seccomp=unconfined --security-opt \
                      apparmor=unconfined --security-opt systempaths=unconfined` (namespaces and a \
                      fresh /proc for each job), or grade outside the container; where the container \
                      itself is all the isolation wanted, --unsandboxed runs the code in it with all of \
                      the grader's rights there"
                    .into(),
            };
        }
        let hint = if self.is_like("debian") {
            format!(" ({} may need `sysctl -w kernel.unprivileged_userns_clone=1`)", self.distribution())
        } else {
            String::new()
        };
        Unavailable {
            cause: format!("bubblewrap cannot make namespaces on {}{words}", self.distribution()),
            fix: format!(
                "allow unprivileged user namespaces{hint}, see README \"Grading handed-in code: \
                 the sandbox\"; {UNSANDBOXED}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine's files: `(path, text)` under a fresh root.
    fn machine(name: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::Builder::new().prefix(&format!("host-{name}-")).tempdir().unwrap();
        for (path, text) in files {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        root
    }

    const DEBIAN_10: &str = "PRETTY_NAME=\"Debian GNU/Linux 10 (buster)\"\nID=debian\n";
    const UBUNTU_24: &str = "PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nID=ubuntu\nID_LIKE=debian\n";
    const RHEL_7: &str =
        "PRETTY_NAME=\"Red Hat Enterprise Linux Server 7.9 (Maipo)\"\nID=\"rhel\"\nID_LIKE=\"fedora\"\n";
    const BWRAP_SAID: &str = "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.";

    fn why(root: &tempfile::TempDir, euid: u32) -> Unavailable {
        Host::at(root.path(), euid).no_namespaces(Path::new("/usr/bin/bwrap"), BWRAP_SAID)
    }

    #[test]
    fn debian_with_unprivileged_userns_clone_off_gets_debians_sysctl() {
        let root = machine(
            "debian",
            &[
                ("etc/os-release", DEBIAN_10),
                ("proc/sys/kernel/unprivileged_userns_clone", "0\n"),
                ("proc/sys/user/max_user_namespaces", "63229\n"),
            ],
        );
        let why = why(&root, 1000);
        assert!(why.cause.contains("Debian GNU/Linux 10 (buster)"), "{why}");
        assert!(why.cause.contains("kernel.unprivileged_userns_clone = 0"), "{why}");
        assert!(why.cause.contains("No permissions to creating new namespace"), "bwrap's own words: {why}");
        assert!(why.fix.contains("sysctl -w kernel.unprivileged_userns_clone=1"), "{why}");
        assert!(why.fix.contains("/etc/sysctl.d/"), "{why}");
        assert!(why.fix.contains("--unsandboxed"), "{why}");
        assert!(!why.fix.contains("apparmor"), "{why}");
    }

    #[test]
    fn ubuntu_restricting_through_apparmor_gets_a_profile_for_bwrap() {
        let root = machine(
            "ubuntu",
            &[
                ("etc/os-release", UBUNTU_24),
                ("proc/sys/kernel/unprivileged_userns_clone", "1\n"),
                ("proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1\n"),
                ("proc/sys/user/max_user_namespaces", "63229\n"),
            ],
        );
        let why = why(&root, 1000);
        assert!(
            why.cause.contains("Ubuntu 24.04.1 LTS restricts unprivileged user namespaces through AppArmor"),
            "{why}"
        );
        assert!(
            why.fix.contains("profile ddp-lab-bwrap /usr/bin/bwrap flags=(unconfined) {\\n  userns,\\n}"),
            "{why}"
        );
        assert!(why.fix.contains("apparmor_parser -r /etc/apparmor.d/ddp-lab-bwrap"), "{why}");
        assert!(why.fix.contains("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"), "{why}");
        assert!(!why.fix.contains("unprivileged_userns_clone"), "not Debian's switch: {why}");
    }

    #[test]
    fn user_namespaces_switched_off_get_max_user_namespaces() {
        let root =
            machine("rhel", &[("etc/os-release", RHEL_7), ("proc/sys/user/max_user_namespaces", "0\n")]);
        let why = why(&root, 1000);
        assert!(why.cause.contains("Red Hat Enterprise Linux Server 7.9"), "{why}");
        assert!(why.cause.contains("user.max_user_namespaces = 0"), "{why}");
        assert!(why.fix.contains("sysctl -w user.max_user_namespaces=15000"), "{why}");
    }

    #[test]
    fn a_restriction_of_unprivileged_users_is_not_blamed_for_root() {
        // Root in a Docker container on an Ubuntu host: the host's AppArmor switch does
        // not bind root; the container does.
        let root = machine(
            "docker",
            &[
                ("etc/os-release", UBUNTU_24),
                ("proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1\n"),
                (".dockerenv", ""),
                ("proc/self/status", "Name:\tchecker\nSeccomp:\t2\nSeccomp_filters:\t1\n"),
            ],
        );
        let why = why(&root, 0);
        assert!(
            why.cause.contains("inside a Docker container (/.dockerenv), under a seccomp filter"),
            "{why}"
        );
        assert!(why.fix.contains("--security-opt seccomp=unconfined"), "{why}");
        assert!(why.fix.contains("systempaths=unconfined"), "{why}");
        assert!(!why.fix.contains("apparmor_parser"), "{why}");
        // The same machine as an ordinary user: AppArmor is the first thing to fix.
        assert!(self::why(&root, 1000).fix.contains("apparmor_parser"));
    }

    #[test]
    fn an_unknown_cause_still_names_the_distribution_and_bwraps_words() {
        let root = machine("plain", &[("etc/os-release", UBUNTU_24)]);
        let why = why(&root, 1000);
        assert!(why.cause.contains("on Ubuntu 24.04.1 LTS (bubblewrap said: bwrap: No permissions"), "{why}");
        assert!(why.fix.contains("kernel.unprivileged_userns_clone=1"), "Ubuntu is like Debian: {why}");
        let bare = machine("bare", &[]);
        assert!(self::why(&bare, 1000).cause.contains("on this Linux"));
    }
}
