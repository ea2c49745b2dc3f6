//! `execl`, `execlp` and `execle`: glibc builds their argument array and calls its internal
//! execve, which no interposer sees, so a program that runs another with them (and, with
//! `execle`, a scrubbed environment) would lose Iris in the new image while keeping its Iris
//! fds. Stable Rust cannot define a C-variadic function, so each is a naked entry point that
//! saves the six argument registers and hands them, with the address of the arguments passed
//! on the stack, to [`exec_list`], which reads the list the System V x86-64 ABI way (pointer
//! arguments of a variadic call sit exactly where those of a plain call would) and calls the
//! interposed `execve`/`execvpe`.

use libc::{c_char, c_int};

/// Which function of the family.
const EXECL: u32 = 0;
const EXECLP: u32 = 1;
const EXECLE: u32 = 2;

/// Most arguments read from the list (glibc has no limit; a longer list fails with E2BIG).
const MAX_ARGS: usize = 4096;

/// Argument `i` of the call: the first six in the saved registers, the rest on the stack.
///
/// # Safety
/// `regs` holds six saved words and `stack` the caller's stack arguments, of which there are
/// at least `i - 5` when `i >= 6` (the list's NULL terminator bounds the reads).
unsafe fn arg(regs: *const usize, stack: *const usize, i: usize) -> usize {
    // SAFETY: per the contract.
    unsafe {
        if i < 6 {
            *regs.add(i)
        } else {
            *stack.add(i - 6)
        }
    }
}

/// The body of the three entry points.
///
/// # Safety
/// Called only by the entry points below, with the saved registers and the caller's stack
/// arguments of a call `f(path, arg0, ..., NULL[, envp])`.
unsafe extern "C" fn exec_list(regs: *const usize, stack: *const usize, kind: u32) -> c_int {
    // SAFETY: argument 0 is the path or file name.
    let path = unsafe { arg(regs, stack, 0) } as *const c_char;
    let mut argv: Vec<*const c_char> = Vec::new();
    let mut i = 1;
    loop {
        // SAFETY: the list runs until a NULL, which the caller must pass.
        let a = unsafe { arg(regs, stack, i) } as *const c_char;
        argv.push(a);
        i += 1;
        if a.is_null() {
            break;
        }
        if i > MAX_ARGS {
            crate::errno::set(libc::E2BIG);
            return -1;
        }
    }
    match kind {
        EXECLE => {
            // SAFETY: execle passes the environment after the NULL.
            let envp = unsafe { arg(regs, stack, i) } as *const *const c_char;
            // SAFETY: forwarding to the interposed execve.
            unsafe { crate::exec::execve(path, argv.as_ptr(), envp) }
        }
        // SAFETY: forwarding to the interposed execvp.
        EXECLP => unsafe { crate::exec::execvp(path, argv.as_ptr()) },
        // SAFETY: forwarding to the interposed execv.
        _ => unsafe { crate::exec::execv(path, argv.as_ptr()) },
    }
}

/// An entry point: save the register arguments, point at the stack ones, call `exec_list`.
macro_rules! entry {
    ($name:ident, $kind:expr) => {
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() -> c_int {
            // SAFETY: touches only this frame: it saves the six argument registers in it and
            // passes their address and that of the caller's stack arguments to `exec_list`; the
            // stack is 16-byte aligned at that call (8 mod 16 at entry, then push rbp and 48).
            core::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                "sub rsp, 48",
                "mov [rsp], rdi",
                "mov [rsp + 8], rsi",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rcx",
                "mov [rsp + 32], r8",
                "mov [rsp + 40], r9",
                "mov rdi, rsp",
                // Past the saved rbp and the return address: the seventh argument.
                "lea rsi, [rbp + 16]",
                "mov edx, {kind}",
                "call {body}",
                "leave",
                "ret",
                kind = const $kind,
                body = sym exec_list,
            )
        }
    };
}

entry!(execl, EXECL);
entry!(execlp, EXECLP);
entry!(execle, EXECLE);
