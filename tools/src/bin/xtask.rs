//! `cargo xtask`: the project's harness.
//!
//! - `cargo xtask vm [--kernel SERIES] [--timeout SECS] -- CMD...` boots a
//!   QEMU (TCG) guest with Debian's distribution kernel and the soft-RoCE
//!   driver (rxe0 on a veth pair), runs CMD as root in the workspace inside
//!   a chroot of the host's root, and exits with CMD's exit status.
//! - `cargo xtask test [--kernel SERIES] [--timeout SECS] [--no-host] [-- ARGS...]`
//!   runs the host tests, builds the VM suite (package `verbs-tests`) and
//!   the `verbs` examples, runs every VM test executable in one VM and
//!   prints `N passed, N failed`.
//! - `cargo xtask demo [--kernel SERIES]` builds the examples and runs the
//!   two-process `rc_client_server` demo in the VM.
//!
//! Downloads and builds are cached in `<workspace>/.vm-cache/`.

#[macro_use]
#[path = "../xtask/util.rs"]
mod util;
#[path = "../xtask/initramfs.rs"]
mod initramfs;
#[path = "../xtask/kernel.rs"]
mod kernel;
#[path = "../xtask/linkage.rs"]
mod linkage;
#[path = "../xtask/testrun.rs"]
mod testrun;
#[path = "../xtask/vm.rs"]
mod vm;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// The project's harness: a soft-RoCE VM runner and the test driver.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Boot the soft-RoCE VM (rxe0 ready) and run CMD in it, in the
    /// workspace, as root; exits with CMD's exit status.
    Vm {
        /// Kernel series: "6.1" (Debian 12's kernel) or "6.12".
        #[arg(long, value_name = "SERIES", default_value = kernel::DEFAULT_SERIES)]
        kernel: String,
        /// Kill the VM after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 1200)]
        timeout: u64,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Build the examples and run the rc_client_server demo (server and
    /// client processes, RDMA WRITE/READ and SEND/RECV) in the rxe VM.
    Demo {
        /// Kernel series: "6.1" (Debian 12's kernel) or "6.12".
        #[arg(long, value_name = "SERIES", default_value = kernel::DEFAULT_SERIES)]
        kernel: String,
        /// Kill the VM after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 600)]
        timeout: u64,
    },
    /// Run the host tests, then the VM suite (package verbs-tests) in one VM.
    Test {
        /// Kernel series: "6.1" (Debian 12's kernel) or "6.12".
        #[arg(long, value_name = "SERIES", default_value = kernel::DEFAULT_SERIES)]
        kernel: String,
        /// Kill the VM after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 1200)]
        timeout: u64,
        /// Skip the host test phase (`cargo test --workspace ...`).
        #[arg(long)]
        no_host: bool,
        /// Extra arguments for each VM test executable (after `--`).
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<OsString>,
    },
}

fn vm_options(kernel: String, timeout: u64) -> Result<vm::VmOptions, String> {
    if timeout == 0 {
        return Err("--timeout must be at least 1 second".into());
    }
    Ok(vm::VmOptions {
        series: kernel,
        timeout: Duration::from_secs(timeout),
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    vm::install_signal_handlers();
    let result = match cli.command {
        Cmd::Vm {
            kernel,
            timeout,
            command,
        } => vm_options(kernel, timeout)
            .map_err(anyhow::Error::msg)
            .and_then(|opts| vm::vm_command(&opts, &command))
            .map(|status| u8::try_from(status).unwrap_or(1)),
        Cmd::Demo { kernel, timeout } => vm_options(kernel, timeout)
            .map_err(anyhow::Error::msg)
            .and_then(|opts| testrun::demo_command(&opts))
            .map(|status| u8::try_from(status).unwrap_or(1)),
        Cmd::Test {
            kernel,
            timeout,
            no_host,
            args,
        } => vm_options(kernel, timeout)
            .map_err(anyhow::Error::msg)
            .and_then(|vm| {
                testrun::test_command(&testrun::TestOptions {
                    vm,
                    extra_args: args,
                    no_host,
                })
            })
            .map(|ok| if ok { 0 } else { 1 }),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if let Some(t) = err.downcast_ref::<vm::Timeout>() {
                eprintln!("vm: {t}");
                return ExitCode::from(124);
            }
            eprintln!("xtask: error: {err:#}");
            ExitCode::from(1)
        }
    }
}
