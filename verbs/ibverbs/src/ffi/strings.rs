//! The names libibverbs gives its enums' values: `ibv_wc_status_str`,
//! `ibv_event_type_str`, `ibv_node_type_str` and `ibv_port_state_str`
//! (`ibv_wr_opcode_str` is with the other opcode helpers in `enums`).

use super::*;

/// The `ibv_wc_status_str` strings, NUL-terminated, built once.
fn wc_status_strings() -> &'static [CString] {
    static S: OnceLock<Vec<CString>> = OnceLock::new();
    S.get_or_init(|| {
        (0..=22u32)
            .map(|s| CString::new(WcStatus(s).as_str()).unwrap_or_default())
            .collect()
    })
}

/// `ibv_wc_status_str`: a static description of a completion status
/// ("unknown" for a value libibverbs does not name).
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    guard(c"unknown".as_ptr(), || {
        let all = wc_status_strings();
        let last = all.len() - 1;
        let i = usize::try_from(status).map_or(last, |i| i.min(last));
        all[i].as_ptr()
    })
}

/// The string at index `v` of `table`, or "unknown".
fn str_at(table: &'static [&'static CStr], v: c_int) -> *const c_char {
    usize::try_from(v)
        .ok()
        .and_then(|i| table.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

/// `ibv_event_type_str`: a static description of an async event type
/// ("unknown" for a value libibverbs does not name).
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"CQ error (overrun or failure)",
        c"QP fatal error",
        c"QP invalid request error",
        c"QP access violation",
        c"communication established",
        c"send queue drained",
        c"path migration done",
        c"path migration failed",
        c"device fatal error",
        c"port became active",
        c"port error",
        c"LID changed",
        c"P_Key table changed",
        c"subnet manager changed",
        c"SRQ error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client re-registration requested",
        c"GID table changed",
        c"WQ fatal error",
    ];
    str_at(T, event)
}

/// `ibv_node_type_str`: a static description of a node type.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    // IBV_NODE_CA is 1; -1 (IBV_NODE_UNKNOWN) and 0 are not named.
    const T: &[&CStr] = &[
        c"unknown",
        c"InfiniBand channel adapter (CA)",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP RNIC",
        c"usNIC",
        c"usNIC over UDP",
        c"unspecified",
    ];
    str_at(T, node_type)
}

/// `ibv_port_state_str`: a static description of a port state.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"no change (NOP)",
        c"down",
        c"initializing",
        c"armed",
        c"active",
        c"active, deferred",
    ];
    str_at(T, port_state)
}
