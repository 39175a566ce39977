//! Kubernetes resource quantities (`100m`, `1.5`, `1Gi`, `128G`, `1e3`, `500Ki`), parsed exactly.
//!
//! A quantity is held as an integer number of nano-units, so every form the API server accepts is
//! represented without floating point. Like Kubernetes, precision finer than a nano-unit is rounded
//! up, and the accessors that return whole units or milli-units round up as well (`0.5m` CPU is
//! 1 millicore; `1.5` bytes is 2 bytes).

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

const NANOS_PER_UNIT: i128 = 1_000_000_000;
const NANOS_PER_MILLI: i128 = 1_000_000;

/// An exact Kubernetes quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
}

/// Why a quantity string could not be parsed. Carries the offending input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid quantity {input:?}: {reason}")]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

impl Quantity {
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// Parses the Kubernetes quantity grammar: an optionally signed decimal number followed by a
    /// binary suffix (`Ki`..`Ei`), a decimal suffix (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`,
    /// `E`) or a decimal exponent (`e3`, `E-2`).
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        let err = |reason| QuantityError {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty string"));
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let number_len = rest
            .bytes()
            .position(|b| !(b.is_ascii_digit() || b == b'.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => {
                if f.contains('.') {
                    return Err(err("more than one decimal point"));
                }
                (i, f)
            }
            None => (number, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err("no digits"));
        }
        // Leading zeros carry no value; dropping them keeps long zero-padded inputs in range.
        let int_part = int_part.trim_start_matches('0');
        let frac_part = frac_part.trim_end_matches('0');
        let mut mantissa: i128 = 0;
        for digit in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(digit - b'0')))
                .ok_or_else(|| err("too many digits"))?;
        }
        let frac_digits = i32::try_from(frac_part.len()).map_err(|_| err("too many digits"))?;

        // value = mantissa * 10^(dec_exp - frac_digits) * 2^bin_exp
        let (dec_exp, bin_exp): (i32, u32) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            other => {
                let exp = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or_else(|| err("unknown suffix"))?;
                let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err("malformed exponent"));
                }
                let value: i32 = exp.parse().map_err(|_| err("exponent out of range"))?;
                (value, 0)
            }
        };
        if mantissa == 0 {
            return Ok(Quantity::ZERO);
        }
        // Scale to nano-units: multiply by 10^(9 + dec_exp - frac_digits) and 2^bin_exp.
        let mut scaled = mantissa
            .checked_mul(1i128 << bin_exp)
            .ok_or_else(|| err("value too large"))?;
        let pow10 = 9i64 + i64::from(dec_exp) - i64::from(frac_digits);
        if pow10 >= 0 {
            let factor = pow10_i128(pow10).ok_or_else(|| err("value too large"))?;
            scaled = scaled
                .checked_mul(factor)
                .ok_or_else(|| err("value too large"))?;
        } else {
            // Finer than a nano-unit: round up, as Kubernetes does.
            scaled = match pow10_i128(-pow10) {
                Some(divisor) => ceil_div(scaled, divisor),
                None => 1,
            };
        }
        if scaled > i128::from(i64::MAX) * NANOS_PER_UNIT {
            return Err(err("value too large"));
        }
        Ok(Quantity {
            nanos: if negative { -scaled } else { scaled },
        })
    }

    /// A quantity of whole units.
    pub fn from_units(units: i64) -> Quantity {
        Quantity {
            nanos: i128::from(units) * NANOS_PER_UNIT,
        }
    }

    /// A quantity of milli-units.
    pub fn from_millis(millis: i64) -> Quantity {
        Quantity {
            nanos: i128::from(millis) * NANOS_PER_MILLI,
        }
    }

    /// Whole units, rounded up (Kubernetes `Value()`), saturating at the i64 range.
    pub fn value(&self) -> i64 {
        saturate(ceil_div(self.nanos, NANOS_PER_UNIT))
    }

    /// Milli-units, rounded up (Kubernetes `MilliValue()`), saturating at the i64 range.
    pub fn milli_value(&self) -> i64 {
        saturate(ceil_div(self.nanos, NANOS_PER_MILLI))
    }

    /// The exact value in nano-units.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl fmt::Display for Quantity {
    /// Prints the shortest exact decimal form (`1500m`, `2`, `250n`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nanos;
        if n % NANOS_PER_UNIT == 0 {
            write!(f, "{}", n / NANOS_PER_UNIT)
        } else if n % NANOS_PER_MILLI == 0 {
            write!(f, "{}m", n / NANOS_PER_MILLI)
        } else if n % 1000 == 0 {
            write!(f, "{}u", n / 1000)
        } else {
            write!(f, "{n}n")
        }
    }
}

fn pow10_i128(exp: i64) -> Option<i128> {
    let exp = u32::try_from(exp).ok()?;
    10i128.checked_pow(exp)
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 { q + 1 } else { q }
}

fn saturate(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn every_suffix_form_parses_exactly() {
        assert_eq!(q("100m").milli_value(), 100);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("1Gi").value(), 1 << 30);
        assert_eq!(q("128G").value(), 128_000_000_000);
        assert_eq!(q("1e3").value(), 1000);
        assert_eq!(q("500Ki").value(), 500 * 1024);
        assert_eq!(q("2E").value(), 2_000_000_000_000_000_000);
        assert_eq!(q("1Ei").value(), 1 << 60);
        assert_eq!(q("1.5Gi").value(), 3 << 29);
        assert_eq!(q("250u").nanos(), 250_000);
        assert_eq!(q("7n").nanos(), 7);
        assert_eq!(q("12k").value(), 12_000);
        assert_eq!(q("3M").value(), 3_000_000);
        assert_eq!(q("1T").value(), 1_000_000_000_000);
        assert_eq!(q("1P").value(), 1_000_000_000_000_000);
        assert_eq!(q("2Mi").value(), 2 << 20);
        assert_eq!(q("1Ti").value(), 1 << 40);
        assert_eq!(q("1Pi").value(), 1 << 50);
        assert_eq!(q("1E-3").milli_value(), 1);
        assert_eq!(q("1e+2").value(), 100);
        assert_eq!(q(".5").milli_value(), 500);
        assert_eq!(q("5.").value(), 5);
        assert_eq!(q("+4").value(), 4);
        assert_eq!(q("-4").value(), -4);
        assert_eq!(q("0").value(), 0);
        assert_eq!(q("000012").value(), 12);
    }

    #[test]
    fn rounding_goes_up_like_kubernetes() {
        assert_eq!(q("0.5m").milli_value(), 1);
        assert_eq!(q("1.5").value(), 2);
        assert_eq!(q("100m").value(), 1);
        assert_eq!(q("1e-10").nanos(), 1);
        assert_eq!(q("1001m").value(), 2);
    }

    #[test]
    fn malformed_quantities_name_the_input() {
        for bad in [
            "", "abc", "1.2.3", "1Zi", "1e", "1ee3", "--1", ".", "1 Gi", "1e3.5", "Gi",
        ] {
            let e = Quantity::parse(bad).unwrap_err();
            assert_eq!(e.input, bad);
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn absurd_magnitudes_are_errors_not_panics() {
        assert!(Quantity::parse("1e100").is_err());
        assert!(Quantity::parse("99999999999999999999999999999999999999999").is_err());
        assert!(Quantity::parse("1e2147483648").is_err());
        assert_eq!(q("1e-100").nanos(), 1);
        assert_eq!(q("1e-2147483648").nanos(), 1);
    }

    #[test]
    fn display_round_trips() {
        for s in ["1500m", "2", "250n", "7u", "0"] {
            assert_eq!(q(s).to_string(), s);
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,24}") {
            let _ = Quantity::parse(&s);
        }

        #[test]
        fn integer_with_binary_suffix_is_exact(n in 0i64..4096, shift in 0usize..5) {
            let suffix = ["Ki", "Mi", "Gi", "Ti", "Pi"][shift];
            let expected = i128::from(n) << (10 * (shift as u32 + 1));
            prop_assert_eq!(i128::from(q(&format!("{n}{suffix}")).value()), expected);
        }

        #[test]
        fn milli_form_equals_decimal_form(millis in 0i64..100_000_000) {
            let decimal = format!("{}.{:03}", millis / 1000, millis % 1000);
            prop_assert_eq!(q(&format!("{millis}m")), q(&decimal));
            prop_assert_eq!(q(&decimal).milli_value(), millis);
        }

        #[test]
        fn exponent_form_equals_plain_form(n in 0i64..1_000_000, e in 0u32..9) {
            let plain = i128::from(n) * 10i128.pow(e);
            prop_assert_eq!(i128::from(q(&format!("{n}e{e}")).value()), plain);
        }

        #[test]
        fn display_then_parse_is_identity(nanos in -1_000_000_000_000i64..1_000_000_000_000) {
            let original = Quantity { nanos: i128::from(nanos) };
            prop_assert_eq!(q(&original.to_string()), original);
        }
    }
}
