//! `cargo xtask demo`: the examples' client and server in the rxe VM.

use anyhow::Result;

use super::cargo::{examples_build, metadata};
use crate::util::{self, describe, workspace_root};

/// `cargo xtask demo`: builds the examples and runs `rc_client_server`
/// (server and client, two processes) in the rxe VM.
pub fn demo_command(vm: &crate::vm::VmOptions) -> Result<i32> {
    let ws = workspace_root();
    let (_, target_dir) = metadata()?;
    let mut cmd = examples_build(&ws);
    say!("building examples: {}", describe(&cmd));
    util::run(&mut cmd)?;
    let script = format!(
        "RVERBS_TARGET_DIR={} exec sh tests/vm/rc_client_server.sh",
        util::shell_quote_os(target_dir.as_os_str())?
    );
    crate::vm::vm_command(vm, &["sh".into(), "-c".into(), script.into()])
}
