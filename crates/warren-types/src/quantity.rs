//! Kubernetes resource quantities ("500m", "2", "1.5Gi", "1e3") parsed to exact integers.
//!
//! Caps are compared and summed as integers (millicores for CPU, bytes for memory) so a
//! devfile cannot slip past a limit through rounding.

use std::fmt;

/// A quantity that does not parse, or does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a resource quantity (examples: 500m, 2, 512Mi, 1Gi)")]
    Syntax(String),
    #[error("{0:?} is negative; resource quantities must be zero or more")]
    Negative(String),
    #[error("{0:?} is too large")]
    Overflow(String),
}

/// Parses a CPU quantity to millicores (`"500m"` → 500, `"2"` → 2000); rounds up fractions.
pub fn parse_cpu_millis(s: &str) -> Result<u64, QuantityError> {
    parse_scaled(s, 1000)
}

/// Parses a memory quantity to bytes (`"1Gi"` → 1073741824, `"500M"` → 500000000).
pub fn parse_memory_bytes(s: &str) -> Result<u64, QuantityError> {
    parse_scaled(s, 1)
}

/// Parses `s` and returns its value multiplied by `unit`, rounded up to an integer.
fn parse_scaled(s: &str, unit: u128) -> Result<u64, QuantityError> {
    let syntax = || QuantityError::Syntax(s.to_owned());
    let t = s.trim();
    if t.is_empty() || t.len() > 64 {
        return Err(syntax());
    }
    if let Some(rest) = t.strip_prefix('-') {
        if !rest.is_empty() {
            return Err(QuantityError::Negative(s.to_owned()));
        }
        return Err(syntax());
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(syntax());
    }
    // value = digits / 10^frac_len * multiplier, where the multiplier is num/den.
    let (num, den): (u128, u128) = match suffix {
        "" => (1, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        other => {
            let exp = other
                .strip_prefix(['e', 'E'])
                .ok_or_else(syntax)?
                .parse::<i32>()
                .map_err(|_| syntax())?;
            if !(-18..=18).contains(&exp) {
                return Err(syntax());
            }
            if exp >= 0 {
                (10u128.pow(exp as u32), 1)
            } else {
                (1, 10u128.pow((-exp) as u32))
            }
        }
    };
    if frac_part.len() > 18 || int_part.len() > 24 {
        return Err(QuantityError::Overflow(s.to_owned()));
    }
    let digits: u128 = format!("{int_part}{frac_part}")
        .parse()
        .map_err(|_| syntax())?;
    let scale = 10u128.pow(frac_part.len() as u32);
    let overflow = || QuantityError::Overflow(s.to_owned());
    let top = digits
        .checked_mul(num)
        .and_then(|v| v.checked_mul(unit))
        .ok_or_else(overflow)?;
    let bottom = scale.checked_mul(den).ok_or_else(overflow)?;
    let value = top.div_ceil(bottom);
    u64::try_from(value).map_err(|_| overflow())
}

/// Formats millicores the way Kubernetes prints them ("500m", "2").
pub fn format_cpu_millis(m: u64) -> String {
    if m.is_multiple_of(1000) {
        format!("{}", m / 1000)
    } else {
        format!("{m}m")
    }
}

/// Formats bytes with the largest exact binary suffix ("512Mi", "1Gi", "1000").
pub fn format_memory_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (suffix, size) in UNITS {
        if b != 0 && b.is_multiple_of(size) {
            return format!("{}{suffix}", b / size);
        }
    }
    b.to_string()
}

/// Formats a size on disk for people, to one decimal in the largest binary unit it reaches
/// ("0 B", "512 B", "1.5 KiB", "2.0 GiB").
pub fn format_size(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut value = b as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A CPU and memory pair in exact units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuMemory {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

impl fmt::Display for CpuMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu {}, memory {}",
            format_cpu_millis(self.cpu_millis),
            format_memory_bytes(self.memory_bytes)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_for_people() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(2 << 30), "2.0 GiB");
        assert_eq!(format_size(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn cpu() {
        assert_eq!(parse_cpu_millis("500m"), Ok(500));
        assert_eq!(parse_cpu_millis("2"), Ok(2000));
        assert_eq!(parse_cpu_millis("0.5"), Ok(500));
        assert_eq!(parse_cpu_millis("1.0005"), Ok(1001), "rounds up");
        assert_eq!(parse_cpu_millis("1e3"), Ok(1_000_000));
        assert!(matches!(
            parse_cpu_millis("-1"),
            Err(QuantityError::Negative(_))
        ));
        assert!(matches!(
            parse_cpu_millis("abc"),
            Err(QuantityError::Syntax(_))
        ));
        assert!(matches!(
            parse_cpu_millis("1x"),
            Err(QuantityError::Syntax(_))
        ));
        assert!(matches!(
            parse_cpu_millis("."),
            Err(QuantityError::Syntax(_))
        ));
        assert!(matches!(
            parse_cpu_millis(""),
            Err(QuantityError::Syntax(_))
        ));
    }

    #[test]
    fn memory() {
        assert_eq!(parse_memory_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(parse_memory_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_memory_bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_memory_bytes("500M"), Ok(500_000_000));
        assert_eq!(parse_memory_bytes("128974848"), Ok(128_974_848));
        assert_eq!(parse_memory_bytes("129e6"), Ok(129_000_000));
        assert!(matches!(
            parse_memory_bytes("9999999999Ei"),
            Err(QuantityError::Overflow(_))
        ));
        assert_eq!(format_memory_bytes(512 << 20), "512Mi");
        assert_eq!(format_memory_bytes(1000), "1000");
        assert_eq!(format_cpu_millis(1500), "1500m");
        assert_eq!(format_cpu_millis(2000), "2");
    }
}
