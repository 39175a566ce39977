//! Device selectors: CEL expressions over one device, in the environment the scheduler gives them.
//!
//! The variable is `device`, with `device.driver` (a string), `device.attributes["<domain>"].<id>`
//! (ints, bools, strings, and versions as semantic versions) and `device.capacity["<domain>"].<id>`
//! (quantities). Looking up a domain the device has nothing in gives an empty map, so
//! `has(device.attributes["other.example.com"].x)` is false rather than an error.
//!
//! Besides the CEL standard library (and its string, list and math extensions), the Kubernetes
//! functions selectors use are defined here: `quantity()`, `isQuantity()` and the quantity
//! methods (`compareTo`, `isGreaterThan`, `isLessThan`, `add`, `sub`, `sign`, `isInteger`,
//! `asInteger`, `asApproximateFloat`), `semver()`, `isSemver()` and the version methods
//! (`compareTo`, `isGreaterThan`, `isLessThan`, `major`, `minor`, `patch`), and `cel.bind`.
//!
//! An expression is compiled once: a syntax error, a call of a function that does not exist here,
//! an expression longer than the API allows or one whose worst-case work is too large is a compile
//! error. Evaluation errors (a missing attribute, a wrong type) are reported to the caller, which
//! decides what they mean for the claim.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue};
use cel::extractors::This;
use cel::objects::Opaque;
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{Context, Env, ExecutionError, Program, Value};
use ferroscale_model::{DeviceAttribute, Quantity};

/// The longest selector expression the API accepts (`CELSelectorExpressionMaxLength`).
pub(crate) const MAX_EXPRESSION_LENGTH: usize = 10 * 1024;

/// The most elementary steps an expression may take in the worst case, estimated when it is
/// compiled: comprehensions multiply their body by the size of what they iterate. It bounds the
/// work of one evaluation as the API server's cost limit does.
const MAX_ESTIMATED_COST: u64 = 1_000_000;

/// The deepest nesting of brackets and unary operators an expression may have: the parser and
/// the interpreter recurse on it, and a thread's stack must not run out on hostile input.
const MAX_NESTING: usize = 64;

/// The size assumed for a list or map a comprehension iterates when it is not a literal: a
/// device has at most this many attributes and capacities together.
const ASSUMED_COLLECTION_SIZE: u64 = 32;

/// The functions this environment adds to the CEL standard library.
const KUBERNETES_FUNCTIONS: [&str; 16] = [
    "quantity",
    "isQuantity",
    "semver",
    "isSemver",
    "compareTo",
    "isGreaterThan",
    "isLessThan",
    "add",
    "sub",
    "sign",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "major",
    "minor",
    "patch",
];

/// The standard environment with the extensions selectors may use and `cel.bind`, built once.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Each extension registers new function names only; a failure would be a bug in the
    // library, and leaves the environment without that extension rather than failing.
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_extension(cel::extensions::lists);
    let _ = env.add_extension(cel::extensions::math);
    let _ = env.add_macro(Macro::receiver("bind", 3, bind_macro));
    Arc::new(env)
});

/// A compiled selector.
#[derive(Debug)]
pub(crate) struct Selector {
    program: Program,
    /// String literals of the expression: the domains it may look up get an empty map when the
    /// device has nothing in them.
    literals: BTreeSet<String>,
}

/// Why an expression does not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompileError(pub String);

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Selector {
    pub(crate) fn compile(source: &str) -> Result<Selector, CompileError> {
        if source.len() > MAX_EXPRESSION_LENGTH {
            return Err(CompileError(format!(
                "expression is {} characters long, more than the {MAX_EXPRESSION_LENGTH} allowed",
                source.len()
            )));
        }
        let nesting = nesting_depth(source);
        if nesting > MAX_NESTING {
            return Err(CompileError(format!(
                "expression nests {nesting} levels deep, more than the {MAX_NESTING} allowed"
            )));
        }
        // The parser is a dependency: a panic in it must not take the process down.
        let program = std::panic::catch_unwind(|| ENV.compile(source))
            .map_err(|_| CompileError("the CEL parser failed on this expression".to_string()))?
            .map_err(|e| CompileError(format!("compilation failed: {e}")))?;
        let references = program.references();
        let mut unknown: Vec<&str> = references
            .functions()
            .into_iter()
            .filter(|name| !is_known_function(name))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            return Err(CompileError(format!(
                "undeclared reference to function(s) {}",
                unknown.join(", ")
            )));
        }
        // Variables bound by comprehensions (macros, `cel.bind`) are local to them.
        let mut bound = BTreeSet::new();
        walk(program.expression(), &mut |e| {
            if let Expr::Comprehension(c) = e {
                bound.insert(c.iter_var.clone());
                bound.extend(c.iter_var2.clone());
                bound.insert(c.accu_var.clone());
            }
        });
        let mut variables = references.variables();
        variables.retain(|v| *v != "device" && !bound.contains(*v));
        variables.sort_unstable();
        if let Some(variable) = variables.first() {
            return Err(CompileError(format!(
                "undeclared reference to '{variable}'"
            )));
        }
        let cost = estimated_cost(program.expression());
        if cost > MAX_ESTIMATED_COST {
            return Err(CompileError(format!(
                "estimated cost {cost} exceeds the limit of {MAX_ESTIMATED_COST}"
            )));
        }
        let mut literals = BTreeSet::new();
        collect_string_literals(program.expression(), &mut literals);
        Ok(Selector { program, literals })
    }

    /// Evaluates the selector for one device: `Ok(true)` when it selects it.
    pub(crate) fn matches(&self, device: &DeviceView<'_>) -> Result<bool, String> {
        let value = device.to_value(&self.literals)?;
        let mut context = Context::with_env(ENV.clone());
        register_functions(&mut context);
        context.add_variable_from_value("device", value);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.program.execute(&context)
        }))
        .map_err(|_| "the CEL interpreter failed on this expression".to_string())?;
        match result {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "expression evaluated to {:?}, not a bool",
                other.type_of()
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// What a selector sees of a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceView<'a> {
    pub driver: &'a str,
    pub attributes: &'a BTreeMap<String, DeviceAttribute>,
    pub capacity: &'a BTreeMap<String, Quantity>,
}

impl DeviceView<'_> {
    fn to_value(self, literals: &BTreeSet<String>) -> Result<Value, String> {
        let mut attributes: HashMap<String, HashMap<String, Value>> = HashMap::new();
        for (name, attribute) in self.attributes {
            let (domain, id) = split_qualified(name, self.driver);
            let value = match attribute {
                DeviceAttribute::Int(i) => Value::Int(*i),
                DeviceAttribute::Bool(b) => Value::Bool(*b),
                DeviceAttribute::String(s) => Value::from(s.clone()),
                DeviceAttribute::Version(v) => {
                    Value::Opaque(Arc::new(SemverValue::parse(v).map_err(|e| {
                        format!("attribute {name}: parse semantic version: {e}")
                    })?))
                }
            };
            attributes
                .entry(domain.to_string())
                .or_default()
                .insert(id.to_string(), value);
        }
        let mut capacity: HashMap<String, HashMap<String, Value>> = HashMap::new();
        for (name, quantity) in self.capacity {
            let (domain, id) = split_qualified(name, self.driver);
            capacity.entry(domain.to_string()).or_default().insert(
                id.to_string(),
                Value::Opaque(Arc::new(QuantityValue(*quantity))),
            );
        }
        // Unknown domains read as empty maps, as in the scheduler's environment.
        for literal in literals {
            attributes.entry(literal.clone()).or_default();
            capacity.entry(literal.clone()).or_default();
        }
        let to_value = |maps: HashMap<String, HashMap<String, Value>>| {
            Value::from(
                maps.into_iter()
                    .map(|(k, v)| (k, Value::from(v)))
                    .collect::<HashMap<String, Value>>(),
            )
        };
        let mut device = HashMap::new();
        device.insert("driver".to_string(), Value::from(self.driver.to_string()));
        device.insert("attributes".to_string(), to_value(attributes));
        device.insert("capacity".to_string(), to_value(capacity));
        Ok(Value::from(device))
    }
}

/// How deep brackets and prefix operators (`!`, `-`) nest in the source, string literals aside.
/// Chains of binary operators count too, by their length over 8, as the parser nests them.
fn nesting_depth(source: &str) -> usize {
    let (mut depth, mut deepest, mut prefix_run, mut binary) = (0usize, 0usize, 0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in source.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '!' | '-' => prefix_run += 1,
            '&' | '|' | '+' | '*' | '/' | '%' | '<' | '>' | '=' | '?' => binary += 1,
            c if c.is_whitespace() => {}
            _ => prefix_run = 0,
        }
        deepest = deepest.max(depth + prefix_run + binary / 16);
    }
    deepest
}

/// `<domain>/<id>`, or the driver as domain for a bare id.
fn split_qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

fn is_known_function(name: &str) -> bool {
    // Operators (`_+_`, `@in`, `!_`, `-_`) and macro internals are part of the language.
    if name.starts_with(['_', '@', '!', '-']) || KUBERNETES_FUNCTIONS.contains(&name) {
        return true;
    }
    // The standard library and its extensions declare their functions in the environment; a
    // context refuses to register a function under such a name.
    let mut probe = Context::with_env(ENV.clone());
    probe.add_function(name, || true).is_err()
}

/// `cel.bind(name, init, body)`: `body` with `name` bound to `init`, as a comprehension over
/// nothing whose accumulator is the binding.
fn bind_macro(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    let is_cel = matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == "cel");
    if !is_cel {
        // `x.bind(a, b, c)` on anything else is an ordinary call.
        return Ok(None);
    }
    let [name, init, body]: [IdedExpr; 3] = match std::mem::take(args).try_into() {
        Ok(three) => three,
        Err(_) => return Ok(None),
    };
    let Expr::Ident(variable) = name.expr else {
        return Err(helper.new_error(
            name.id,
            "cel.bind() variable name must be a simple identifier",
        ));
    };
    let bind = ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: variable,
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident("#unused".to_owned())),
        result: body,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(bind)))))
}

/// Calls `f` on every node of the expression.
fn walk(expression: &IdedExpr, f: &mut impl FnMut(&Expr)) {
    f(&expression.expr);
    match &expression.expr {
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                walk(target, f);
            }
            for arg in &call.args {
                walk(arg, f);
            }
        }
        Expr::Comprehension(c) => {
            for e in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                walk(e, f);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(|e| walk(e, f)),
        Expr::Map(map) => map.entries.iter().for_each(|e| walk_entry(&e.expr, f)),
        Expr::Struct(s) => s.entries.iter().for_each(|e| walk_entry(&e.expr, f)),
        Expr::Select(select) => walk(&select.operand, f),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn walk_entry(entry: &EntryExpr, f: &mut impl FnMut(&Expr)) {
    match entry {
        EntryExpr::StructField(field) => walk(&field.value, f),
        EntryExpr::MapEntry(entry) => {
            walk(&entry.key, f);
            walk(&entry.value, f);
        }
    }
}

fn collect_string_literals(expression: &IdedExpr, out: &mut BTreeSet<String>) {
    walk(expression, &mut |e| {
        if let Expr::Literal(LiteralValue::String(s)) = e {
            out.insert(s.inner().to_string());
        }
    });
}

/// A worst-case count of the steps of one evaluation: every node costs one, and the loop step of
/// a comprehension counts once per element of its range (a literal list's length, or
/// [`ASSUMED_COLLECTION_SIZE`]).
fn estimated_cost(expression: &IdedExpr) -> u64 {
    match &expression.expr {
        Expr::Comprehension(c) => {
            let iterations = match &c.iter_range.expr {
                Expr::List(list) => list.elements.len() as u64,
                _ => ASSUMED_COLLECTION_SIZE,
            };
            let per_iteration =
                estimated_cost(&c.loop_cond).saturating_add(estimated_cost(&c.loop_step));
            estimated_cost(&c.iter_range)
                .saturating_add(estimated_cost(&c.accu_init))
                .saturating_add(estimated_cost(&c.result))
                .saturating_add(iterations.saturating_mul(per_iteration))
        }
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| estimated_cost(t))
            .chain(call.args.iter().map(estimated_cost))
            .fold(1u64, u64::saturating_add),
        Expr::List(list) => list
            .elements
            .iter()
            .map(estimated_cost)
            .fold(1u64, u64::saturating_add),
        Expr::Map(map) => map
            .entries
            .iter()
            .map(|e| entry_cost(&e.expr))
            .fold(1u64, u64::saturating_add),
        Expr::Struct(s) => s
            .entries
            .iter()
            .map(|e| entry_cost(&e.expr))
            .fold(1u64, u64::saturating_add),
        Expr::Select(select) => estimated_cost(&select.operand).saturating_add(1),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 1,
    }
}

fn entry_cost(entry: &EntryExpr) -> u64 {
    match entry {
        EntryExpr::StructField(field) => estimated_cost(&field.value),
        EntryExpr::MapEntry(entry) => {
            estimated_cost(&entry.key).saturating_add(estimated_cost(&entry.value))
        }
    }
}

/// A Kubernetes quantity as a CEL value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QuantityValue(Quantity);

impl Opaque for QuantityValue {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

/// A semantic version as a CEL value. Equality and order ignore build metadata, as semantic
/// versioning says.
#[derive(Debug, Clone)]
struct SemverValue(semver::Version);

impl SemverValue {
    fn parse(text: &str) -> Result<SemverValue, String> {
        semver::Version::parse(text)
            .map(SemverValue)
            .map_err(|e| e.to_string())
    }

    fn precedence(&self, other: &SemverValue) -> Ordering {
        let (a, b) = (&self.0, &other.0);
        (a.major, a.minor, a.patch)
            .cmp(&(b.major, b.minor, b.patch))
            .then_with(|| a.pre.cmp(&b.pre))
    }
}

impl PartialEq for SemverValue {
    fn eq(&self, other: &SemverValue) -> bool {
        self.precedence(other) == Ordering::Equal
    }
}

impl Eq for SemverValue {}

impl Opaque for SemverValue {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

fn err(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn as_quantity(function: &str, value: &Value) -> Result<Quantity, ExecutionError> {
    match value {
        Value::Opaque(o) => o
            .downcast_ref::<QuantityValue>()
            .map(|q| q.0)
            .ok_or_else(|| err(function, "expected a quantity")),
        Value::Int(i) => Ok(Quantity::from_units(*i)),
        _ => Err(err(function, "expected a quantity")),
    }
}

fn as_semver(value: &Value) -> Option<&SemverValue> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<SemverValue>(),
        _ => None,
    }
}

/// The ordering of two quantities or two versions, for `compareTo` and its friends.
fn compare(function: &str, this: &Value, other: &Value) -> Result<Ordering, ExecutionError> {
    if let Some(version) = as_semver(this) {
        let other = as_semver(other)
            .ok_or_else(|| err(function, "a version compares only with a version"))?;
        return Ok(version.precedence(other));
    }
    Ok(as_quantity(function, this)?.cmp(&as_quantity(function, other)?))
}

fn register_functions(context: &mut Context<'_, '_>) {
    // The names are not declared by the standard environment (checked by a test), so these
    // registrations succeed.
    let _ = context.add_function(
        "quantity",
        |text: Arc<String>| -> Result<Value, ExecutionError> {
            Quantity::parse(&text)
                .map(|q| Value::Opaque(Arc::new(QuantityValue(q))))
                .map_err(|e| err("quantity", e))
        },
    );
    let _ = context.add_function("isQuantity", |text: Arc<String>| {
        Quantity::parse(&text).is_ok()
    });
    let _ = context.add_function(
        "semver",
        |text: Arc<String>| -> Result<Value, ExecutionError> {
            SemverValue::parse(&text)
                .map(|v| Value::Opaque(Arc::new(v)))
                .map_err(|e| err("semver", e))
        },
    );
    let _ = context.add_function("isSemver", |text: Arc<String>| {
        SemverValue::parse(&text).is_ok()
    });
    let _ = context.add_function(
        "compareTo",
        |This(this): This<Value>, other: Value| -> Result<i64, ExecutionError> {
            Ok(match compare("compareTo", &this, &other)? {
                Ordering::Less => -1,
                Ordering::Equal => 0,
                Ordering::Greater => 1,
            })
        },
    );
    let _ = context.add_function(
        "isGreaterThan",
        |This(this): This<Value>, other: Value| -> Result<bool, ExecutionError> {
            Ok(compare("isGreaterThan", &this, &other)? == Ordering::Greater)
        },
    );
    let _ = context.add_function(
        "isLessThan",
        |This(this): This<Value>, other: Value| -> Result<bool, ExecutionError> {
            Ok(compare("isLessThan", &this, &other)? == Ordering::Less)
        },
    );
    let _ = context.add_function(
        "add",
        |This(this): This<Value>, other: Value| -> Result<Value, ExecutionError> {
            let sum = as_quantity("add", &this)?.nanos() + as_quantity("add", &other)?.nanos();
            Ok(Value::Opaque(Arc::new(QuantityValue(quantity_from_nanos(
                sum,
            )))))
        },
    );
    let _ = context.add_function(
        "sub",
        |This(this): This<Value>, other: Value| -> Result<Value, ExecutionError> {
            let diff = as_quantity("sub", &this)?.nanos() - as_quantity("sub", &other)?.nanos();
            Ok(Value::Opaque(Arc::new(QuantityValue(quantity_from_nanos(
                diff,
            )))))
        },
    );
    let _ = context.add_function(
        "sign",
        |This(this): This<Value>| -> Result<i64, ExecutionError> {
            Ok(match as_quantity("sign", &this)?.nanos().cmp(&0) {
                Ordering::Less => -1,
                Ordering::Equal => 0,
                Ordering::Greater => 1,
            })
        },
    );
    let _ = context.add_function(
        "isInteger",
        |This(this): This<Value>| -> Result<bool, ExecutionError> {
            let nanos = as_quantity("isInteger", &this)?.nanos();
            Ok(nanos % 1_000_000_000 == 0 && i64::try_from(nanos / 1_000_000_000).is_ok())
        },
    );
    let _ = context.add_function(
        "asInteger",
        |This(this): This<Value>| -> Result<i64, ExecutionError> {
            let nanos = as_quantity("asInteger", &this)?.nanos();
            if nanos % 1_000_000_000 != 0 {
                return Err(err("asInteger", "cannot convert value to integer"));
            }
            i64::try_from(nanos / 1_000_000_000)
                .map_err(|_| err("asInteger", "cannot convert value to integer"))
        },
    );
    let _ = context.add_function(
        "asApproximateFloat",
        |This(this): This<Value>| -> Result<f64, ExecutionError> {
            Ok(as_quantity("asApproximateFloat", &this)?.nanos() as f64 / 1e9)
        },
    );
    for (name, part) in [("major", 0usize), ("minor", 1), ("patch", 2)] {
        let _ = context.add_function(
            name,
            move |This(this): This<Value>| -> Result<i64, ExecutionError> {
                let version =
                    as_semver(&this).ok_or_else(|| err(name, "expected a semantic version"))?;
                let v = &version.0;
                let number = [v.major, v.minor, v.patch][part];
                i64::try_from(number).map_err(|_| err(name, "version number out of range"))
            },
        );
    }
}

/// A quantity from nano-units, through the decimal form the parser reads exactly.
fn quantity_from_nanos(nanos: i128) -> Quantity {
    Quantity::parse(&format!("{nanos}n")).unwrap_or(Quantity::ZERO)
}

#[cfg(test)]
mod tests;
