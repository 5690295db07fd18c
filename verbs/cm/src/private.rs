//! Length-framed private data. The CM pads the private data of its
//! messages to a fixed size on InfiniBand and RoCE (a connection request
//! arrives with [`MAX_REQ_PRIVATE_DATA`] bytes, an accept with
//! [`MAX_REP_PRIVATE_DATA`], ...; zeros after what the peer sent), so the
//! receiver cannot tell a 5-byte descriptor from 5 bytes and 51 zeros. These
//! helpers put a two-byte header (a tag and the length) before the payload
//! and read it back exactly; the other side must use them too.
//!
//! [`MAX_REQ_PRIVATE_DATA`]: super::MAX_REQ_PRIVATE_DATA
//! [`MAX_REP_PRIVATE_DATA`]: super::MAX_REP_PRIVATE_DATA

use rverbs::error::{Error, InvalidKind, Result};

/// The first byte of framed private data: tells framed data from the CM's
/// zero padding and from data a peer sent unframed.
pub const FRAME_TAG: u8 = 0xa7;
/// Bytes the frame adds before the payload (the tag and a length byte).
pub const FRAME_HEADER: usize = 2;

/// `payload` framed for a message that carries at most `max` bytes of
/// private data (the `MAX_*_PRIVATE_DATA` of that message): the tag, the
/// length, the payload. Fails if the payload and its header do not fit.
pub fn frame(payload: &[u8], max: usize) -> Result<Vec<u8>> {
    let room = max.saturating_sub(FRAME_HEADER).min(usize::from(u8::MAX));
    if payload.len() > room {
        return Err(Error::invalid_as(
            InvalidKind::TooLarge,
            format!(
                "framed private data of {} bytes exceeds the {room} this message has room for ({max} less the {FRAME_HEADER}-byte header)",
                payload.len()
            ),
        ));
    }
    let mut v = Vec::with_capacity(FRAME_HEADER + payload.len());
    v.push(FRAME_TAG);
    // Fits: payload.len() <= room <= 255.
    v.push(u8::try_from(payload.len()).unwrap_or(u8::MAX));
    v.extend_from_slice(payload);
    Ok(v)
}

/// The payload of private data that [`frame`] produced, exactly as long
/// as it was sent (the CM's padding after it is ignored). Fails with
/// [`InvalidKind::Malformed`] if the data is not framed (too short, wrong
/// tag: the peer sent nothing, or sent it unframed) or its length runs
/// past the data. Never panics, whatever the bytes.
pub fn unframe(data: &[u8]) -> Result<&[u8]> {
    let malformed = |why: String| Error::invalid_as(InvalidKind::Malformed, why);
    let [tag, len, rest @ ..] = data else {
        return Err(malformed(format!(
            "private data of {} bytes is too short to be framed",
            data.len()
        )));
    };
    if *tag != FRAME_TAG {
        return Err(malformed(format!(
            "private data is not framed (first byte {tag:#04x}, not {FRAME_TAG:#04x})"
        )));
    }
    rest.get(..usize::from(*len)).ok_or_else(|| {
        malformed(format!(
            "framed private data says {len} bytes but only {} follow",
            rest.len()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::super::{MAX_REP_PRIVATE_DATA, MAX_REQ_PRIVATE_DATA};
    use super::*;

    #[test]
    fn a_short_payload_survives_the_cms_padding() {
        let mut wire = frame(b"hello", MAX_REQ_PRIVATE_DATA).unwrap();
        wire.resize(MAX_REQ_PRIVATE_DATA, 0);
        assert_eq!(unframe(&wire).unwrap(), b"hello");
        let mut empty = frame(b"", MAX_REQ_PRIVATE_DATA).unwrap();
        empty.resize(MAX_REQ_PRIVATE_DATA, 0);
        assert_eq!(unframe(&empty).unwrap(), b"");
    }

    #[test]
    fn the_largest_payload_fits_and_one_more_byte_does_not() {
        let max = vec![7u8; MAX_REQ_PRIVATE_DATA - FRAME_HEADER];
        assert_eq!(
            unframe(&frame(&max, MAX_REQ_PRIVATE_DATA).unwrap()).unwrap(),
            &max[..]
        );
        let over = vec![7u8; MAX_REQ_PRIVATE_DATA - FRAME_HEADER + 1];
        let e = frame(&over, MAX_REQ_PRIVATE_DATA).unwrap_err();
        assert_eq!(e.invalid_kind(), Some(InvalidKind::TooLarge));
        // The length byte caps a payload at 255 even where the message
        // has more room.
        assert!(frame(&[0; 255], 1000).is_ok());
        assert!(frame(&[0; 256], 1000).is_err());
        assert!(frame(&[0; 194], MAX_REP_PRIVATE_DATA).is_ok());
    }

    #[test]
    fn unframed_and_hostile_data_are_refused() {
        // Nothing sent: the CM's zeros.
        let e = unframe(&[0; MAX_REQ_PRIVATE_DATA]).unwrap_err();
        assert_eq!(e.invalid_kind(), Some(InvalidKind::Malformed));
        assert!(e.to_string().contains("not framed"), "{e}");
        assert!(unframe(&[]).is_err());
        assert!(unframe(&[FRAME_TAG]).is_err());
        // A length past the data.
        let e = unframe(&[FRAME_TAG, 9, 1, 2]).unwrap_err();
        assert!(
            e.to_string().contains("says 9 bytes but only 2 follow"),
            "{e}"
        );
        assert_eq!(unframe(&[FRAME_TAG, 2, 1, 2]).unwrap(), &[1, 2]);
    }
}
