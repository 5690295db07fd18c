//! The QP state machine of the InfiniBand specification (the "QP state
//! transition" table: legal transitions, and per transport the attributes a
//! MODIFY_QP must and may carry), for the transports the emulator creates:
//! RC, UC and UD.

use rverbs_abi::qp::attr_mask as m;
use rverbs_abi::qp::{qp_state as s, qp_type as t};

/// Attributes that must and may accompany a transition, or `None` if the
/// transition is illegal (or the transport unsupported).
fn params(cur: u8, next: u8, qp_type: u8) -> Option<(u32, u32)> {
    let per_type = |rc: (u32, u32), uc: (u32, u32), ud: (u32, u32)| match qp_type {
        t::RC => Some(rc),
        t::UC => Some(uc),
        t::UD => Some(ud),
        _ => None,
    };
    const NONE: (u32, u32) = (0, 0);
    match (cur, next) {
        // Any state may go to RESET or ERR, with no attributes.
        (c, s::RESET | s::ERR) if c <= s::ERR => per_type(NONE, NONE, NONE),
        (s::RESET, s::INIT) => per_type(
            (m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS, 0),
            (m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS, 0),
            (m::PKEY_INDEX | m::PORT | m::QKEY, 0),
        ),
        (s::INIT, s::INIT) => per_type(
            (0, m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS),
            (0, m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS),
            (0, m::PKEY_INDEX | m::PORT | m::QKEY),
        ),
        (s::INIT, s::RTR) => per_type(
            (
                m::AV
                    | m::PATH_MTU
                    | m::DEST_QPN
                    | m::RQ_PSN
                    | m::MAX_DEST_RD_ATOMIC
                    | m::MIN_RNR_TIMER,
                m::ALT_PATH | m::ACCESS_FLAGS | m::PKEY_INDEX,
            ),
            (
                m::AV | m::PATH_MTU | m::DEST_QPN | m::RQ_PSN,
                m::ALT_PATH | m::ACCESS_FLAGS | m::PKEY_INDEX,
            ),
            (0, m::PKEY_INDEX | m::QKEY),
        ),
        (s::RTR, s::RTS) => per_type(
            (
                m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::SQ_PSN | m::MAX_QP_RD_ATOMIC,
                m::CUR_STATE | m::ALT_PATH | m::ACCESS_FLAGS | m::MIN_RNR_TIMER | m::PATH_MIG_STATE,
            ),
            (
                m::SQ_PSN,
                m::CUR_STATE | m::ALT_PATH | m::ACCESS_FLAGS | m::PATH_MIG_STATE,
            ),
            (m::SQ_PSN, m::CUR_STATE | m::QKEY),
        ),
        (s::RTS | s::SQD, s::RTS) => per_type(
            (
                0,
                m::CUR_STATE | m::ACCESS_FLAGS | m::ALT_PATH | m::PATH_MIG_STATE | m::MIN_RNR_TIMER,
            ),
            (
                0,
                m::CUR_STATE | m::ACCESS_FLAGS | m::ALT_PATH | m::PATH_MIG_STATE,
            ),
            (0, m::CUR_STATE | m::QKEY),
        ),
        (s::RTS, s::SQD) => per_type(
            (0, m::EN_SQD_ASYNC_NOTIFY),
            (0, m::EN_SQD_ASYNC_NOTIFY),
            (0, m::EN_SQD_ASYNC_NOTIFY),
        ),
        (s::SQD, s::SQD) => per_type(
            (
                0,
                m::PORT
                    | m::AV
                    | m::TIMEOUT
                    | m::RETRY_CNT
                    | m::RNR_RETRY
                    | m::MAX_QP_RD_ATOMIC
                    | m::MAX_DEST_RD_ATOMIC
                    | m::ALT_PATH
                    | m::ACCESS_FLAGS
                    | m::PKEY_INDEX
                    | m::MIN_RNR_TIMER
                    | m::PATH_MIG_STATE,
            ),
            (
                0,
                m::AV | m::ALT_PATH | m::ACCESS_FLAGS | m::PKEY_INDEX | m::PATH_MIG_STATE,
            ),
            (0, m::PKEY_INDEX | m::QKEY),
        ),
        (s::SQE, s::RTS) => per_type(
            NONE,
            (0, m::CUR_STATE | m::ACCESS_FLAGS),
            (0, m::CUR_STATE | m::QKEY),
        ),
        _ => None,
    }
}

/// Whether a MODIFY_QP from `cur` to `next` with attribute mask `mask` is
/// legal for a QP of type `qp_type`: the transition exists, every required
/// attribute is present and nothing else but the optional ones (and the
/// state itself) is. `CUR_STATE` is only meaningful from RTR, RTS, SQD and
/// SQE.
pub fn transition_ok(cur: u8, next: u8, qp_type: u8, mask: u32) -> bool {
    if cur > s::ERR || next > s::ERR {
        return false;
    }
    if mask & m::CUR_STATE != 0 && !matches!(cur, s::RTR | s::RTS | s::SQD | s::SQE) {
        return false;
    }
    let Some((required, optional)) = params(cur, next, qp_type) else {
        return false;
    };
    mask & required == required && mask & !(required | optional | m::STATE) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const RC_INIT: u32 = m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS;
    const RC_RTR: u32 = m::STATE
        | m::AV
        | m::PATH_MTU
        | m::DEST_QPN
        | m::RQ_PSN
        | m::MAX_DEST_RD_ATOMIC
        | m::MIN_RNR_TIMER;
    const RC_RTS: u32 =
        m::STATE | m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::SQ_PSN | m::MAX_QP_RD_ATOMIC;

    #[test]
    fn rc_bring_up() {
        assert!(transition_ok(s::RESET, s::INIT, t::RC, RC_INIT));
        assert!(transition_ok(s::INIT, s::RTR, t::RC, RC_RTR));
        assert!(transition_ok(s::RTR, s::RTS, t::RC, RC_RTS));
    }

    #[test]
    fn illegal_transitions() {
        assert!(!transition_ok(s::RESET, s::RTS, t::RC, RC_RTS));
        assert!(!transition_ok(s::RESET, s::RTR, t::RC, RC_RTR));
        assert!(!transition_ok(s::INIT, s::RTS, t::RC, RC_RTS));
        assert!(!transition_ok(s::RTR, s::RTR, t::RC, m::STATE));
        assert!(!transition_ok(s::ERR, s::RTS, t::UD, m::STATE | m::SQ_PSN));
        assert!(!transition_ok(s::RESET, 7, t::RC, m::STATE));
    }

    #[test]
    fn missing_or_extra_attributes() {
        // RC RTR without MIN_RNR_TIMER.
        assert!(!transition_ok(
            s::INIT,
            s::RTR,
            t::RC,
            RC_RTR & !m::MIN_RNR_TIMER
        ));
        // UC RTR does not take MAX_DEST_RD_ATOMIC.
        assert!(!transition_ok(s::INIT, s::RTR, t::UC, RC_RTR));
        // UD INIT needs a Q_Key, not access flags.
        assert!(!transition_ok(s::RESET, s::INIT, t::UD, RC_INIT));
        assert!(transition_ok(
            s::RESET,
            s::INIT,
            t::UD,
            m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY
        ));
        // CUR_STATE only from RTR/RTS/SQD/SQE.
        assert!(!transition_ok(s::INIT, s::INIT, t::RC, m::CUR_STATE));
        assert!(transition_ok(s::RTS, s::RTS, t::RC, m::CUR_STATE));
    }

    #[test]
    fn reset_and_error_from_anywhere() {
        for cur in s::RESET..=s::ERR {
            assert!(transition_ok(cur, s::RESET, t::UC, m::STATE));
            assert!(transition_ok(cur, s::ERR, t::UD, m::STATE));
            assert!(!transition_ok(cur, s::ERR, t::RC, m::STATE | m::QKEY));
        }
    }
}
