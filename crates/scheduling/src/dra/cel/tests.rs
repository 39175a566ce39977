//! Tests of the device selector environment: what selectors see of a device and the Kubernetes
//! functions they may call.

use std::collections::BTreeMap;

use ferroscale_model::{DeviceAttribute, Quantity};

use super::*;

fn gpu() -> (
    BTreeMap<String, DeviceAttribute>,
    BTreeMap<String, Quantity>,
) {
    let attributes = BTreeMap::from([
        (
            "gpu.example.com/model".to_string(),
            DeviceAttribute::String("a100".into()),
        ),
        (
            "gpu.example.com/cores".to_string(),
            DeviceAttribute::Int(108),
        ),
        (
            "gpu.example.com/mig".to_string(),
            DeviceAttribute::Bool(false),
        ),
        (
            "gpu.example.com/driverVersion".to_string(),
            DeviceAttribute::Version("550.54.15".into()),
        ),
        (
            "pci.example.org/slot".to_string(),
            DeviceAttribute::String("0000:3b:00.0".into()),
        ),
    ]);
    let capacity = BTreeMap::from([(
        "gpu.example.com/memory".to_string(),
        Quantity::parse("40Gi").unwrap(),
    )]);
    (attributes, capacity)
}

fn eval(expression: &str) -> Result<bool, String> {
    let (attributes, capacity) = gpu();
    let selector = Selector::compile(expression).map_err(|e| format!("compile: {e}"))?;
    selector.matches(&DeviceView {
        driver: "gpu.example.com",
        attributes: &attributes,
        capacity: &capacity,
    })
}

/// DRA-115: selectors read the driver, attributes per domain and capacities as quantities.
#[test]
fn selectors_see_the_driver_attributes_per_domain_and_capacity() {
    assert_eq!(eval("device.driver == 'gpu.example.com'"), Ok(true));
    assert_eq!(
        eval("device.attributes['gpu.example.com'].model == 'a100'"),
        Ok(true)
    );
    assert_eq!(
        eval("device.attributes['gpu.example.com'].cores > 100"),
        Ok(true)
    );
    assert_eq!(eval("!device.attributes['gpu.example.com'].mig"), Ok(true));
    assert_eq!(
        eval("device.attributes['pci.example.org'].slot.startsWith('0000:3b')"),
        Ok(true)
    );
    assert_eq!(
        eval("device.capacity['gpu.example.com'].memory.compareTo(quantity('32Gi')) >= 0"),
        Ok(true)
    );
    assert_eq!(
        eval("device.capacity['gpu.example.com'].memory.isGreaterThan(quantity('80Gi'))"),
        Ok(false)
    );
    assert_eq!(
        eval("device.capacity['gpu.example.com'].memory.isLessThan(quantity('41Gi'))"),
        Ok(true)
    );
    assert_eq!(
        eval("device.capacity['gpu.example.com'].memory == quantity('40960Mi')"),
        Ok(true)
    );
    assert_eq!(
        eval(
            "device.capacity['gpu.example.com'].memory.add(quantity('8Gi')).isGreaterThan(quantity('47Gi'))"
        ),
        Ok(true)
    );
}

/// DRA-115: versions compare as semantic versions, with `semver()` and the version methods.
#[test]
fn versions_compare_as_semantic_versions() {
    let v = "device.attributes['gpu.example.com'].driverVersion";
    assert_eq!(
        eval(&format!("{v}.isGreaterThan(semver('550.9.0'))")),
        Ok(true)
    );
    assert_eq!(
        eval(&format!("{v}.compareTo(semver('550.54.15')) == 0")),
        Ok(true)
    );
    assert_eq!(
        eval(&format!("{v}.isLessThan(semver('550.100.0'))")),
        Ok(true)
    );
    assert_eq!(
        eval(&format!("{v}.major() == 550 && {v}.minor() == 54")),
        Ok(true)
    );
    assert_eq!(eval(&format!("{v} == semver('550.54.15')")), Ok(true));
    assert_eq!(
        eval("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))"),
        Ok(true)
    );
    assert_eq!(eval("isSemver('1.2') || isQuantity('x')"), Ok(false));
}

/// DRA-115: a domain the device has nothing in reads as an empty map, so `has()` is false there; a
/// missing attribute of a known domain is an evaluation error.
#[test]
fn an_unknown_domain_is_empty_and_a_missing_attribute_is_an_error() {
    assert_eq!(
        eval("has(device.attributes['other.example.com'].model)"),
        Ok(false)
    );
    assert_eq!(
        eval("has(device.attributes['gpu.example.com'].model)"),
        Ok(true)
    );
    assert_eq!(
        eval("size(device.capacity['other.example.com']) == 0"),
        Ok(true)
    );
    let missing = eval("device.attributes['gpu.example.com'].numa == 0").unwrap_err();
    assert!(missing.contains("numa"), "{missing}");
    let wrong_type = eval("device.attributes['gpu.example.com'].model > 3").unwrap_err();
    assert!(!wrong_type.is_empty());
}

/// DRA-115: `cel.bind` names a sub-expression once.
#[test]
fn cel_bind_names_a_sub_expression() {
    assert_eq!(
        eval(
            "cel.bind(gpu, device.attributes['gpu.example.com'], gpu.model == 'a100' && gpu.cores > 8)"
        ),
        Ok(true)
    );
}

/// DRA-115: an unknown function, an undeclared variable, a syntax error, an overlong or too
/// costly expression are compile errors, never panics.
#[test]
fn bad_expressions_are_compile_errors() {
    let unknown =
        Selector::compile("device.attributes['gpu.example.com'].model.frobnicate()").unwrap_err();
    assert!(unknown.0.contains("frobnicate"), "{unknown}");
    let variable = Selector::compile("gpu.model == 'a100'").unwrap_err();
    assert!(variable.0.contains("gpu"), "{variable}");
    assert!(Selector::compile("device.driver ==").is_err());
    let long = format!("device.driver == '{}'", "x".repeat(MAX_EXPRESSION_LENGTH));
    assert!(Selector::compile(&long).unwrap_err().0.contains("long"));
    let list = format!("[{}]", vec!["1"; 200].join(","));
    let costly = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c > 0)))");
    assert!(Selector::compile(&costly).unwrap_err().0.contains("cost"));
    assert!(Selector::compile("[1, 2].all(x, x > 0) && device.driver != ''").is_ok());
}

/// A non-boolean result is an evaluation error.
#[test]
fn a_selector_must_evaluate_to_a_bool() {
    assert!(eval("device.driver").unwrap_err().contains("not a bool"));
}

/// The Kubernetes functions do not collide with the standard environment's, so registering
/// them on a context always succeeds.
#[test]
fn the_kubernetes_functions_are_not_standard_ones() {
    for name in KUBERNETES_FUNCTIONS {
        let mut probe = Context::with_env(ENV.clone());
        assert!(probe.add_function(name, || true).is_ok(), "{name}");
    }
}

/// DRA-115: hostile nesting (deep brackets, long runs of prefix operators, very long chains of
/// binary operators) is refused when compiling, before the parser could run out of stack.
#[test]
fn deep_nesting_is_refused_before_parsing() {
    let deep = format!("{}true{}", "(".repeat(2000), ")".repeat(2000));
    assert!(Selector::compile(&deep).unwrap_err().0.contains("nests"));
    let negations = format!("{}true", "!".repeat(5000));
    assert!(
        Selector::compile(&negations)
            .unwrap_err()
            .0
            .contains("nests")
    );
    let chain = vec!["true"; 1200].join(" && ");
    assert!(Selector::compile(&chain).unwrap_err().0.contains("nests"));
    // Brackets inside strings do not count; ordinary selectors are far below the limit.
    assert!(Selector::compile("device.driver != '((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((('").is_ok());
    assert!(Selector::compile("device.driver == 'a' && device.driver != 'b' || (device.driver == 'c' && !(device.driver == 'd'))").is_ok());
}
