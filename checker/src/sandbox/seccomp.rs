//! What stands in for bubblewrap's `--disable-userns` (0.8.0) on an older bubblewrap: a
//! seccomp filter, handed to bwrap's `--seccomp FD` (there since 0.1), that refuses to
//! make a user namespace.
//!
//! Without either, a process of the job may `unshare(CLONE_NEWUSER)` and hold every
//! capability inside that nested namespace. The mounts it inherits stay locked, so
//! it sees no more of the host than before; what it gains is the kernel code that
//! only a capable process reaches (new mount and network namespaces, filesystems a
//! user namespace may mount, netfilter): the usual first step of a kernel privilege
//! escalation. The filter closes exactly that: `unshare` and `clone` with
//! `CLONE_NEWUSER` fail with EPERM, as bubblewrap's own option makes them fail, and
//! `clone3` (whose flags sit in memory a filter cannot read) fails with ENOSYS, on
//! which glibc falls back to `clone` for threads and `posix_spawn`, as it does under
//! Docker's default profile.
//!
//! The program is classic BPF over `struct seccomp_data` (linux/seccomp.h): `nr` at
//! offset 0, `arch` at 4, `args[0]` at 16. Only x86_64 and aarch64 are written here; on
//! any other machine [`filter`] is `None` and an older bubblewrap is refused.

/// One BPF instruction (`struct sock_filter`, linux/filter.h), 8 bytes as the kernel
/// and bwrap read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

// linux/bpf_common.h
const LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
const JEQ: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const JGE: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const JSET: u16 = 0x05 | 0x40; // BPF_JMP | BPF_JSET | BPF_K
const RET: u16 = 0x06; // BPF_RET | BPF_K

// linux/seccomp.h
pub const RET_ALLOW: u32 = 0x7fff_0000;
pub const RET_ERRNO: u32 = 0x0005_0000;
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;

/// linux/sched.h
pub const CLONE_NEWUSER: u32 = 0x1000_0000;

/// The machine's system calls as the filter names them.
#[derive(Debug, Clone, Copy)]
pub struct Arch {
    /// `AUDIT_ARCH_*` (linux/audit.h): a process of another ABI (32-bit code on a
    /// 64-bit kernel) numbers its calls otherwise, so it is killed.
    pub audit: u32,
    pub unshare: u32,
    pub clone: u32,
    pub clone3: u32,
    /// x86_64's x32 ABI shares the architecture and sets this bit in the number.
    pub x32_bit: Option<u32>,
}

pub const X86_64: Arch =
    Arch { audit: 0xc000_003e, unshare: 272, clone: 56, clone3: 435, x32_bit: Some(0x4000_0000) };
pub const AARCH64: Arch = Arch { audit: 0xc000_00b7, unshare: 97, clone: 220, clone3: 435, x32_bit: None };

/// This machine's, where one is written.
pub fn this_arch() -> Option<Arch> {
    if cfg!(target_arch = "x86_64") {
        Some(X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(AARCH64)
    } else {
        None
    }
}

/// The filter for this machine; `None` where none is written.
pub fn filter() -> Option<Vec<Insn>> {
    this_arch().map(program)
}

/// Where a jump goes: on to the next instruction, past some, or to a return.
#[derive(Clone, Copy)]
enum To {
    Next,
    Skip(u8),
    Allow,
    Eperm,
    Enosys,
    Kill,
}

/// The filter for `arch`.
pub fn program(arch: Arch) -> Vec<Insn> {
    // Offset of the low 32 bits of args[0] (the flags of unshare and clone).
    let flags_at = if cfg!(target_endian = "little") { 16 } else { 20 };
    let load = |k| (LD_W_ABS, k, To::Next, To::Next);
    let mut steps = vec![load(4), (JEQ, arch.audit, To::Next, To::Kill), load(0)];
    if let Some(bit) = arch.x32_bit {
        steps.push((JGE, bit, To::Enosys, To::Next));
    }
    steps.extend([
        (JEQ, arch.clone3, To::Enosys, To::Next),
        (JEQ, arch.unshare, To::Skip(1), To::Next),
        (JEQ, arch.clone, To::Next, To::Allow),
        load(flags_at),
        (JSET, CLONE_NEWUSER, To::Eperm, To::Allow),
    ]);
    // The four returns follow the steps, in this order.
    let returns =
        [RET_ALLOW, RET_ERRNO | libc::EPERM as u32, RET_ERRNO | libc::ENOSYS as u32, RET_KILL_PROCESS];
    let first_return = steps.len();
    // A jump's offset counts the instructions it skips.
    let offset = |from: usize, to: To| -> u8 {
        let target = match to {
            To::Next => from + 1,
            To::Skip(n) => from + 1 + n as usize,
            To::Allow => first_return,
            To::Eperm => first_return + 1,
            To::Enosys => first_return + 2,
            To::Kill => first_return + 3,
        };
        (target - from - 1) as u8
    };
    let mut program: Vec<Insn> = steps
        .iter()
        .enumerate()
        .map(|(i, &(code, k, jt, jf))| Insn { code, jt: offset(i, jt), jf: offset(i, jf), k })
        .collect();
    program.extend(returns.map(|k| Insn { code: RET, jt: 0, jf: 0, k }));
    program
}

/// The program as bwrap reads it from its `--seccomp` descriptor.
pub fn bytes(program: &[Insn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for insn in program {
        out.extend_from_slice(&insn.code.to_ne_bytes());
        out.push(insn.jt);
        out.push(insn.jf);
        out.extend_from_slice(&insn.k.to_ne_bytes());
    }
    out
}

/// A descriptor holding `program`, closed on exec until [`keep_open_in_child`] says
/// otherwise for the one child that reads it.
pub fn descriptor(program: &[Insn]) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"ddp-lab-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made and owned by no one else.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    std::fs::File::from(owned.try_clone()?).write_all(&bytes(program))?;
    Ok(owned)
}

/// In the child between fork and exec: the descriptor survives the exec, and bwrap
/// reads it from its start (each spawn of the same command reads it anew).
///
/// # Safety
/// Async-signal-safe: fcntl and lseek only.
pub unsafe fn keep_open_in_child(fd: i32) -> std::io::Result<()> {
    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 || libc::lseek(fd, 0, libc::SEEK_SET) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the filter as the kernel would on one system call.
    fn verdict(program: &[Insn], arch: u32, nr: u32, arg0: u64) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&arch.to_ne_bytes());
        data[16..24].copy_from_slice(&arg0.to_ne_bytes());
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let insn = program[pc];
            pc += 1;
            let jump = |taken: bool| if taken { insn.jt as usize } else { insn.jf as usize };
            match insn.code {
                LD_W_ABS => {
                    let at = insn.k as usize;
                    acc = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                }
                JEQ => pc += jump(acc == insn.k),
                JGE => pc += jump(acc >= insn.k),
                JSET => pc += jump(acc & insn.k != 0),
                RET => return insn.k,
                other => panic!("instruction {other:#x} not expected"),
            }
        }
    }

    #[test]
    fn a_new_user_namespace_is_refused_and_nothing_else() {
        for arch in [X86_64, AARCH64] {
            let p = program(arch);
            let eperm = RET_ERRNO | libc::EPERM as u32;
            let enosys = RET_ERRNO | libc::ENOSYS as u32;
            let clone_newuser = (CLONE_NEWUSER | libc::SIGCHLD as u32) as u64;
            assert_eq!(verdict(&p, arch.audit, arch.unshare, CLONE_NEWUSER as u64), eperm);
            assert_eq!(verdict(&p, arch.audit, arch.unshare, (CLONE_NEWUSER | 0x20000) as u64), eperm);
            assert_eq!(verdict(&p, arch.audit, arch.clone, clone_newuser), eperm);
            // clone3's flags are out of the filter's reach: the call is refused, glibc falls back.
            assert_eq!(verdict(&p, arch.audit, arch.clone3, 0), enosys);
            // Threads, forks, other namespaces, everything else: allowed.
            assert_eq!(verdict(&p, arch.audit, arch.clone, 0x3d0f00), RET_ALLOW);
            assert_eq!(verdict(&p, arch.audit, arch.clone, libc::SIGCHLD as u64), RET_ALLOW);
            assert_eq!(verdict(&p, arch.audit, arch.unshare, 0x20000 /* CLONE_NEWNS */), RET_ALLOW);
            assert_eq!(verdict(&p, arch.audit, 0, 0), RET_ALLOW);
            assert_eq!(verdict(&p, arch.audit, 1, CLONE_NEWUSER as u64), RET_ALLOW);
            // Another ABI's numbering is not trusted.
            assert_eq!(verdict(&p, 0x4000_0003 /* i386 */, arch.unshare, 0), RET_KILL_PROCESS);
        }
        let p = program(X86_64);
        assert_eq!(
            verdict(&p, X86_64.audit, 0x4000_0000 | 272, CLONE_NEWUSER as u64),
            RET_ERRNO | libc::ENOSYS as u32
        );
    }

    #[test]
    fn bwrap_reads_eight_bytes_an_instruction() {
        let p = program(X86_64);
        let b = bytes(&p);
        assert_eq!(b.len(), p.len() * 8);
        assert_eq!(u16::from_ne_bytes([b[0], b[1]]), LD_W_ABS);
        assert_eq!(u32::from_ne_bytes(b[4..8].try_into().unwrap()), 4);
    }
}
