//! Names of work request opcodes and flags, WQE states, and completion
//! statuses and opcodes.

/// `IB_WR_*` names (the kernel's, which the rxe ring carries).
pub fn wr_opcode_name(op: u32) -> String {
    match op {
        0 => "RDMA_WRITE".into(),
        1 => "RDMA_WRITE_WITH_IMM".into(),
        2 => "SEND".into(),
        3 => "SEND_WITH_IMM".into(),
        4 => "RDMA_READ".into(),
        5 => "ATOMIC_CMP_AND_SWP".into(),
        6 => "ATOMIC_FETCH_AND_ADD".into(),
        7 => "LOCAL_INV".into(),
        8 => "BIND_MW".into(),
        9 => "SEND_WITH_INV".into(),
        10 => "TSO".into(),
        11 => "RDMA_READ_WITH_INV".into(),
        12 => "MASKED_ATOMIC_CMP_AND_SWP".into(),
        13 => "MASKED_ATOMIC_FETCH_AND_ADD".into(),
        14 => "FLUSH".into(),
        15 => "ATOMIC_WRITE".into(),
        0x20 => "REG_MR".into(),
        o => format!("opcode {o}"),
    }
}

pub(super) fn send_flag_names(f: u32) -> Vec<String> {
    const NAMES: [&str; 5] = ["FENCE", "SIGNALED", "SOLICITED", "INLINE", "IP_CSUM"];
    let mut v: Vec<String> = NAMES
        .iter()
        .enumerate()
        .filter(|(b, _)| f & (1 << b) != 0)
        .map(|(_, n)| (*n).to_string())
        .collect();
    if f & !0x1f != 0 {
        v.push(format!("{:#x}", f & !0x1f));
    }
    v
}

pub(super) fn wqe_state_name(s: u32) -> String {
    const NAMES: [&str; 5] = ["posted", "processing", "pending", "done", "error"];
    NAMES
        .get(s as usize)
        .map_or_else(|| format!("state {s}"), |n| (*n).into())
}

/// `IB_WC_*` status names.
pub fn wc_status_name(s: u32) -> String {
    const NAMES: [&str; 22] = [
        "SUCCESS",
        "LOC_LEN_ERR",
        "LOC_QP_OP_ERR",
        "LOC_EEC_OP_ERR",
        "LOC_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOC_ACCESS_ERR",
        "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR",
        "REM_OP_ERR",
        "RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR",
        "REM_ABORT_ERR",
        "INV_EECN_ERR",
        "INV_EEC_STATE_ERR",
        "FATAL_ERR",
        "RESP_TIMEOUT_ERR",
        "GENERAL_ERR",
    ];
    NAMES
        .get(s as usize)
        .map_or_else(|| format!("status {s}"), |n| (*n).into())
}

/// Work completion opcode names.
pub fn wc_opcode_name(o: u32) -> String {
    match o {
        0 => "SEND".into(),
        1 => "RDMA_WRITE".into(),
        2 => "RDMA_READ".into(),
        3 => "COMP_SWAP".into(),
        4 => "FETCH_ADD".into(),
        5 => "BIND_MW".into(),
        6 => "LOCAL_INV".into(),
        7 => "TSO".into(),
        8 => "FLUSH".into(),
        9 => "ATOMIC_WRITE".into(),
        128 => "RECV".into(),
        129 => "RECV_RDMA_WITH_IMM".into(),
        o => format!("opcode {o}"),
    }
}
