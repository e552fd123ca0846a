//! A classic-BPF interpreter for the seccomp programs this crate compiles: the supervisor runs
//! the errno program on a notified call's registers to answer it exactly as the kernel would
//! have, and the tests run every program through it. Only the instructions [`super::bpf`]
//! emits are known; anything else (or a jump out of the program) answers `KILL_PROCESS`, the
//! strictest outcome, never `ALLOW`.

/// The registers of one call, as `struct seccomp_data` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Data {
    pub nr: u32,
    pub arch: u32,
    pub args: [u64; 6],
}

impl Data {
    pub fn from_kernel(d: &libc::seccomp_data) -> Data {
        Data {
            nr: d.nr as u32,
            arch: d.arch,
            args: d.args,
        }
    }

    /// The 32-bit word at `off` in `struct seccomp_data`, and whether it is an argument's.
    fn word(&self, off: u32) -> Option<(u32, bool)> {
        match off {
            0 => Some((self.nr, false)),
            4 => Some((self.arch, false)),
            16..=63 if off.is_multiple_of(4) => {
                let arg = self.args[((off - 16) / 8) as usize];
                let v = if off.is_multiple_of(8) {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                };
                Some((v, true))
            }
            _ => None,
        }
    }
}

/// What one run of a program returned, whether its path read an argument (the kernel's
/// action cache only caches paths that read nothing but `nr` and `arch`), and how many
/// instructions it executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub ret: u32,
    pub read_args: bool,
    pub steps: usize,
}

/// Runs `prog` on `d`.
pub fn run(prog: &[libc::sock_filter], d: &Data) -> Run {
    let kill = |steps| Run {
        ret: libc::SECCOMP_RET_KILL_PROCESS,
        read_args: true,
        steps,
    };
    let (mut a, mut pc, mut read_args, mut steps) = (0u32, 0usize, false, 0usize);
    while let Some(i) = prog.get(pc) {
        pc += 1;
        steps += 1;
        match i.code {
            0x20 => match d.word(i.k) {
                Some((v, arg)) => {
                    a = v;
                    read_args |= arg;
                }
                None => return kill(steps),
            },
            0x54 => a &= i.k,
            0x05 => pc += i.k as usize,
            0x15 | 0x25 | 0x35 | 0x45 => {
                let taken = match i.code {
                    0x15 => a == i.k,
                    0x25 => a > i.k,
                    0x35 => a >= i.k,
                    _ => a & i.k != 0,
                };
                pc += if taken { i.jt } else { i.jf } as usize;
            }
            0x06 => {
                return Run {
                    ret: i.k,
                    read_args,
                    steps,
                }
            }
            _ => return kill(steps),
        }
    }
    kill(steps)
}
