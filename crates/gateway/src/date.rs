//! The `Date` header of the gateway's own answers (RFC 9110 §5.6.7 IMF-fixdate),
//! formatted once per second per thread.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub(crate) const LEN: usize = 29;

thread_local! {
    static CACHE: Cell<(u64, [u8; LEN])> = const { Cell::new((u64::MAX, [0; LEN])) };
}

/// The current time as an IMF-fixdate.
pub(crate) fn now() -> [u8; LEN] {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    CACHE.with(|c| {
        let (at, text) = c.get();
        if at == secs {
            return text;
        }
        let text = format(secs);
        c.set((secs, text));
        text
    })
}

/// Formats seconds since the Unix epoch as an IMF-fixdate.
pub(crate) fn format(secs: u64) -> [u8; LEN] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian; eras of 400 years).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = (yoe + era * 400 + u64::from(month <= 2)).min(9999);
    let mut out = [0u8; LEN];
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    out[3..5].copy_from_slice(b", ");
    two(&mut out[5..7], day);
    out[7] = b' ';
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    out[11] = b' ';
    two(&mut out[12..14], year / 100);
    two(&mut out[14..16], year % 100);
    out[16] = b' ';
    two(&mut out[17..19], rem / 3600);
    out[19] = b':';
    two(&mut out[20..22], rem / 60 % 60);
    out[22] = b':';
    two(&mut out[23..25], rem % 60);
    out[25..].copy_from_slice(b" GMT");
    out
}

fn two(out: &mut [u8], n: u64) {
    out[0] = b'0' + (n / 10 % 10) as u8;
    out[1] = b'0' + (n % 10) as u8;
}

#[cfg(test)]
mod tests {
    use super::format;

    #[test]
    fn imf_fixdates() {
        assert_eq!(&format(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&format(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&format(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(&format(1_798_761_599), b"Thu, 31 Dec 2026 23:59:59 GMT");
        assert_eq!(super::now().len(), 29);
    }
}
