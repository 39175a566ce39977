//! Compact resource vectors: cpu, memory, ephemeral storage and pod count as plain integers, plus any
//! extended resource (`nvidia.com/gpu`, `hugepages-2Mi`, ...) in a small sorted list.
//!
//! Units: cpu in millicores, memory and ephemeral storage in bytes, everything else in whole units.

use std::fmt;
use std::sync::Arc;

use thin_vec::ThinVec;

use crate::quantity::{Quantity, QuantityError};

/// Name of an extended resource. Shared, so copying resource vectors never copies names.
pub type ResourceName = Arc<str>;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";
/// The extended resource name NVIDIA's device plugin registers; the default GPU resource.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// An amount of each resource. Missing extended resources are zero.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pods: i64,
    /// Sorted by name, no duplicates, no zero entries. One pointer wide: most pods and nodes have
    /// no extended resource.
    extended: ThinVec<(ResourceName, i64)>,
}

impl Resources {
    /// cpu (millicores) and memory (bytes) only.
    pub fn new(cpu_milli: i64, memory: i64) -> Resources {
        Resources {
            cpu_milli,
            memory,
            ..Resources::default()
        }
    }

    /// Builds a vector from `(name, quantity string)` pairs as they appear in a Kubernetes
    /// `ResourceList`. The error names the resource and the bad value.
    pub fn parse_list<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Resources, (String, QuantityError)> {
        let mut r = Resources::default();
        for (name, value) in pairs {
            let q = Quantity::parse(value).map_err(|e| (name.to_string(), e))?;
            r.set_quantity(name, q);
        }
        Ok(r)
    }

    /// Sets a resource from a quantity, converting to the unit this vector keeps for it.
    pub fn set_quantity(&mut self, name: &str, q: Quantity) {
        let value = if name == CPU {
            q.milli_value()
        } else {
            q.value()
        };
        self.set(name, value);
    }

    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu_milli,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.pods,
            _ => self
                .extended
                .binary_search_by(|(n, _)| n.as_ref().cmp(name))
                .map(|i| self.extended[i].1)
                .unwrap_or(0),
        }
    }

    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            CPU => self.cpu_milli = value,
            MEMORY => self.memory = value,
            EPHEMERAL_STORAGE => self.ephemeral_storage = value,
            PODS => self.pods = value,
            _ => match self
                .extended
                .binary_search_by(|(n, _)| n.as_ref().cmp(name))
            {
                Ok(i) if value == 0 => {
                    self.extended.remove(i);
                }
                Ok(i) => self.extended[i].1 = value,
                Err(_) if value == 0 => {}
                Err(i) => self.extended.insert(i, (Arc::from(name), value)),
            },
        }
    }

    /// Extended resources with a non-zero amount, sorted by name.
    pub fn extended(&self) -> impl Iterator<Item = (&str, i64)> {
        self.extended.iter().map(|(n, v)| (n.as_ref(), *v))
    }

    /// Every resource with a non-zero amount: the four built-ins first, then extended ones.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        [
            (CPU, self.cpu_milli),
            (MEMORY, self.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
            (PODS, self.pods),
        ]
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .chain(self.extended())
    }

    pub fn is_zero(&self) -> bool {
        self.cpu_milli == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.pods == 0
            && self.extended.is_empty()
    }

    pub fn add(&mut self, other: &Resources) {
        self.combine(other, |a, b| a.saturating_add(b));
    }

    pub fn sub(&mut self, other: &Resources) {
        self.combine(other, |a, b| a.saturating_sub(b));
    }

    /// Per-resource maximum (how init containers combine).
    pub fn max_with(&mut self, other: &Resources) {
        self.combine(other, i64::max);
    }

    pub fn plus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.add(other);
        r
    }

    pub fn minus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.sub(other);
        r
    }

    /// Every resource multiplied by `n` (saturating).
    pub fn times(&self, n: i64) -> Resources {
        let mut r = Resources {
            cpu_milli: self.cpu_milli.saturating_mul(n),
            memory: self.memory.saturating_mul(n),
            ephemeral_storage: self.ephemeral_storage.saturating_mul(n),
            pods: self.pods.saturating_mul(n),
            extended: self.extended.clone(),
        };
        for e in &mut r.extended {
            e.1 = e.1.saturating_mul(n);
        }
        r.extended.retain(|(_, v)| *v != 0);
        r
    }

    /// The first resource (in `iter()` order) of which `self` asks more than `available` has,
    /// or `None` when `self` fits. Only resources that `self` actually asks for are checked, the
    /// way the scheduler's resource-fit filter does.
    pub fn first_insufficient<'a>(&'a self, available: &Resources) -> Option<&'a str> {
        if self.cpu_milli > 0 && self.cpu_milli > available.cpu_milli {
            return Some(CPU);
        }
        if self.memory > 0 && self.memory > available.memory {
            return Some(MEMORY);
        }
        if self.ephemeral_storage > 0 && self.ephemeral_storage > available.ephemeral_storage {
            return Some(EPHEMERAL_STORAGE);
        }
        if self.pods > 0 && self.pods > available.pods {
            return Some(PODS);
        }
        self.extended
            .iter()
            .find(|(name, v)| *v > 0 && *v > available.get(name))
            .map(|(name, _)| name.as_ref())
    }

    /// True when every requested amount fits into `available`.
    pub fn fits_in(&self, available: &Resources) -> bool {
        self.first_insufficient(available).is_none()
    }

    fn combine(&mut self, other: &Resources, op: impl Fn(i64, i64) -> i64) {
        self.cpu_milli = op(self.cpu_milli, other.cpu_milli);
        self.memory = op(self.memory, other.memory);
        self.ephemeral_storage = op(self.ephemeral_storage, other.ephemeral_storage);
        self.pods = op(self.pods, other.pods);
        if other.extended.is_empty() && self.extended.is_empty() {
            return;
        }
        let mut merged = ThinVec::with_capacity(self.extended.len() + other.extended.len());
        let (mut i, mut j) = (0, 0);
        while i < self.extended.len() || j < other.extended.len() {
            let take = match (self.extended.get(i), other.extended.get(j)) {
                (Some(a), Some(b)) => a.0.cmp(&b.0),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, _) => std::cmp::Ordering::Greater,
            };
            let (name, value) = match take {
                std::cmp::Ordering::Less => {
                    i += 1;
                    (
                        self.extended[i - 1].0.clone(),
                        op(self.extended[i - 1].1, 0),
                    )
                }
                std::cmp::Ordering::Greater => {
                    j += 1;
                    (
                        other.extended[j - 1].0.clone(),
                        op(0, other.extended[j - 1].1),
                    )
                }
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                    (
                        self.extended[i - 1].0.clone(),
                        op(self.extended[i - 1].1, other.extended[j - 1].1),
                    )
                }
            };
            if value != 0 {
                merged.push((name, value));
            }
        }
        self.extended = merged;
    }
}

impl fmt::Display for Resources {
    /// `cpu=1500m memory=2Gi nvidia.com/gpu=1`, with memory in the largest exact binary unit.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, value) in self.iter() {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            match name {
                CPU => write!(f, "cpu={}", Quantity::from_millis(value))?,
                MEMORY | EPHEMERAL_STORAGE => write!(f, "{name}={}", format_bytes(value))?,
                _ => write!(f, "{name}={value}")?,
            }
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// Bytes in the largest binary unit that divides them exactly (`16Gi`, `1536Mi`, `100`).
pub fn format_bytes(bytes: i64) -> String {
    for (shift, unit) in [
        (60, "Ei"),
        (50, "Pi"),
        (40, "Ti"),
        (30, "Gi"),
        (20, "Mi"),
        (10, "Ki"),
    ] {
        if bytes != 0 && bytes % (1i64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(pairs: &[(&str, &str)]) -> Resources {
        Resources::parse_list(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn parse_list_converts_units() {
        let r = res(&[
            ("cpu", "1.5"),
            ("memory", "2Gi"),
            ("pods", "110"),
            ("nvidia.com/gpu", "2"),
        ]);
        assert_eq!(r.cpu_milli, 1500);
        assert_eq!(r.memory, 2 << 30);
        assert_eq!(r.pods, 110);
        assert_eq!(r.get(NVIDIA_GPU), 2);
        assert_eq!(r.get("example.com/foo"), 0);
    }

    #[test]
    fn parse_list_error_names_resource_and_value() {
        let (name, err) = Resources::parse_list([("memory", "12Qi")]).unwrap_err();
        assert_eq!(name, "memory");
        assert_eq!(err.input, "12Qi");
    }

    #[test]
    fn arithmetic_merges_extended_resources() {
        let a = res(&[("cpu", "1"), ("a.io/x", "1"), ("c.io/z", "3")]);
        let b = res(&[("cpu", "2"), ("b.io/y", "2"), ("c.io/z", "1")]);
        let sum = a.plus(&b);
        assert_eq!(sum.cpu_milli, 3000);
        assert_eq!(
            sum.extended().collect::<Vec<_>>(),
            vec![("a.io/x", 1), ("b.io/y", 2), ("c.io/z", 4)]
        );
        let diff = sum.minus(&b);
        assert_eq!(diff, a);
        let mut m = a.clone();
        m.max_with(&b);
        assert_eq!(m.cpu_milli, 2000);
        assert_eq!(m.get("c.io/z"), 3);
    }

    #[test]
    fn fit_checks_only_requested_resources() {
        let node = res(&[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")]);
        assert!(res(&[("cpu", "4")]).fits_in(&node));
        assert_eq!(
            res(&[("cpu", "4001m")]).first_insufficient(&node),
            Some(CPU)
        );
        assert_eq!(
            res(&[("nvidia.com/gpu", "1")]).first_insufficient(&node),
            Some(NVIDIA_GPU)
        );
        assert!(Resources::default().fits_in(&Resources::default()));
    }

    #[test]
    fn display_is_readable() {
        let r = res(&[
            ("cpu", "500m"),
            ("memory", "1536Mi"),
            ("nvidia.com/gpu", "1"),
        ]);
        assert_eq!(r.to_string(), "cpu=500m memory=1536Mi nvidia.com/gpu=1");
    }
}
