//! `ferroscale`: the command line of the Ferroscale cluster autoscaler.
//!
//! `simulate` plays a scenario file against the real decision engine in simulated time and reports
//! what it decided; `explain` stops at one engine loop and says, pod by pod and group by group, why
//! a scale-up did or did not happen, and node by node why scale-down removes it or not. Exit status: 0 when every expectation holds, 1 when one fails,
//! 2 for an invalid scenario, invalid flags or any other error.
//!
//! `run` is the autoscaler against a live cluster, with the upstream flags (see `run.rs` and
//! `flags.rs`). It is the default subcommand: arguments that start with a flag (`ferroscale
//! --cloud-provider=kwok ...`) are `run`'s, so the binary can replace upstream's under the same
//! container arguments. `ferroscale` alone still asks for a subcommand. `serve-provider` serves a
//! built-in provider over the externalgrpc protocol (`serve_provider.rs`).

mod batching;
mod cloud_nodes;
mod debug_snapshot;
mod flag_docs;
mod flags;
mod logging;
mod profiling;
mod run;
mod serve_provider;
mod source;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use ferroscale_model::parse_go_duration;
use ferroscale_model::time::format_duration;
use ferroscale_sim::explain::{ExplainAt, explain, render_explanation};
use ferroscale_sim::report::{render_html, render_json, render_text};
use ferroscale_sim::runner::{Progress, Simulation};

use crate::source::{Invalid, load};

/// jemalloc, for every subcommand: it can record where memory is allocated, which `--profiling`
/// serves as heap profiles (`profiling.rs`, which also sets jemalloc's options: no sampling
/// unless the flag is given). The library crates leave the allocator to the binary.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Exit status when an expectation of the scenario does not hold.
const EXIT_EXPECTATION_FAILED: u8 = 1;
/// Exit status for an invalid scenario, invalid flags, or any other error.
const EXIT_INVALID: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "ferroscale",
    version,
    about = "Ferroscale: a Kubernetes cluster autoscaler",
    long_about = "Ferroscale: a Kubernetes cluster autoscaler.\n\n\
        Try a configuration before it meets a real cluster: `simulate` plays a scenario file (node \
        groups, a timed workload, expectations) against the real decision engine in accelerated, \
        simulated time; `explain` says why pending pods did or did not trigger a scale-up and why \
        each node is or is not removed by scale-down.",
    after_help = "Examples:\n  \
        ferroscale simulate                          run the bundled default scenario\n  \
        ferroscale simulate burst.yaml --report r.html\n  \
        ferroscale simulate burst.yaml --output json --set expander=most-pods\n  \
        ferroscale explain burst.yaml --at 5m"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scenario in simulated time and report every decision.
    ///
    /// Exit status: 0 when every expectation of the scenario holds, 1 when one fails (each failure
    /// is printed), 2 for an invalid scenario or invalid flags (the error names file, line and
    /// field).
    Simulate(SimulateArgs),
    /// Explain one engine loop: why each pending pod did or did not trigger a scale-up, and why
    /// each node is or is not removed by scale-down.
    ///
    /// Plays the scenario up to the first loop with pending pods (or the first loop at or after
    /// --at; the last loop when no loop had pending pods) and prints, for groups of pods with the
    /// same outcome, the reason per node group: the scheduler filter that rejected the pod on the
    /// group's template, or why the group was skipped (maximum size, backoff, ...). Then, for
    /// groups of nodes with the same verdict: removed now (empty or drained), unneeded and for how
    /// long, or not removable and why (utilization, the blocking pod and its rule, min size,
    /// cooldown).
    Explain(ExplainArgs),
    /// Run the autoscaler against a live cluster (upstream flag syntax; `run --help` lists them).
    /// The default: `ferroscale --cloud-provider=kwok ...` means `ferroscale run ...`.
    #[command(disable_help_flag = true)]
    Run(RunArgs),
    /// Serve a built-in provider (kwok, or the simulator's cloud of a scenario) as the
    /// externalgrpc cloud-provider service (`serve-provider --help` lists the flags).
    #[command(disable_help_flag = true)]
    ServeProvider(RunArgs),
    /// List every flag of `run`: type, default, description, and whether Ferroscale implements
    /// it, warns that it has no effect, or refuses it (the same list as `run --help`).
    Flags(FlagsArgs),
}

#[derive(Args, Debug)]
struct FlagsArgs {
    /// Print docs/flags.md (Markdown tables with the notes) instead of the help text.
    #[arg(long)]
    markdown: bool,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Upstream Cluster Autoscaler flags, e.g. --cloud-provider=kwok --scan-interval=10s.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "FLAGS")]
    flags: Vec<String>,
}

#[derive(Args, Debug)]
struct ScenarioArgs {
    /// Scenario file (YAML, see docs/scenario.md), or the name of a bundled scenario. Without it,
    /// the bundled default scenario runs.
    #[arg(value_name = "SCENARIO")]
    scenario: Option<PathBuf>,

    /// Override an autoscaler flag for this run, by its upstream name (repeatable), e.g.
    /// --set expander=least-waste --set max-nodes-total=50. Applied after the scenario's options.
    #[arg(long = "set", value_name = "FLAG=VALUE", value_parser = parse_override)]
    overrides: Vec<(String, String)>,
}

#[derive(Args, Debug)]
struct SimulateArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,

    /// What to print on standard output: the human timeline and summary, or the JSON summary.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,

    /// Also write a self-contained HTML report (charts and timeline) to this file.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,

    /// Show progress on standard error (default: only when standard error is a terminal).
    #[arg(long)]
    progress: bool,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,

    /// Explain the first engine loop at or after this simulated time (Go syntax: 90s, 10m,
    /// 1h30m). Default: the first loop with pending pods that is not waiting for more of them.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    at: Option<Duration>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    /// Timeline of decisions, then a summary.
    Text,
    /// The summary as JSON (fields fixed by the scenario format).
    Json,
}

/// `flag=value`, with or without leading dashes on the flag.
fn parse_override(text: &str) -> Result<(String, String), String> {
    let (flag, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected FLAG=VALUE, got {text:?}"))?;
    let flag = flag.trim().trim_start_matches('-');
    if flag.is_empty() {
        return Err(format!("missing flag name in {text:?}"));
    }
    Ok((flag.to_string(), value.trim().to_string()))
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_go_duration(text).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(with_default_subcommand(std::env::args_os().collect()));
    let outcome = match cli.command {
        Command::Simulate(args) => simulate(args),
        Command::Explain(args) => explain_command(args),
        Command::Run(args) => run_command(&args.flags),
        Command::ServeProvider(args) => serve_provider_command(&args.flags),
        Command::Flags(args) => {
            if args.markdown {
                print!("{}", flag_docs::markdown());
            } else {
                println!("{}", flag_docs::run_help());
            }
            Ok(ExitCode::SUCCESS)
        }
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            if let Some(invalid) = error.downcast_ref::<Invalid>() {
                eprintln!("error: {invalid}");
            } else {
                eprintln!("error: {error:#}");
            }
            ExitCode::from(EXIT_INVALID)
        }
    }
}

fn serve_provider_command(arguments: &[String]) -> anyhow::Result<ExitCode> {
    match serve_provider::parse_serve_flags(arguments) {
        Ok(serve_provider::ServeCommand::Help) => {
            println!("{}", serve_provider::SERVE_PROVIDER_USAGE);
            Ok(ExitCode::SUCCESS)
        }
        Ok(serve_provider::ServeCommand::Serve(parsed)) => {
            serve_provider::serve(parsed).map(|()| ExitCode::SUCCESS)
        }
        Err(problems) => {
            eprintln!("error: {}", problems.replace('\n', "\nerror: "));
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// Upstream's binary takes its flags with no subcommand; so does this one: arguments that begin
/// with a flag other than help and version are `run`'s.
fn with_default_subcommand(mut arguments: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let first_is_run_flag = arguments
        .get(1)
        .and_then(|first| first.to_str())
        .is_some_and(|first| {
            first.starts_with('-') && !matches!(first, "-h" | "--help" | "-V" | "--version")
        });
    if first_is_run_flag {
        arguments.insert(1, "run".into());
    }
    arguments
}

fn run_command(arguments: &[String]) -> anyhow::Result<ExitCode> {
    match flags::parse_run_flags(arguments) {
        Ok(flags::RunCommand::Help) => {
            println!("{}", flag_docs::run_help());
            Ok(ExitCode::SUCCESS)
        }
        Ok(flags::RunCommand::Run(parsed)) => run::run(*parsed).map(|()| ExitCode::SUCCESS),
        Err(problems) => {
            eprintln!("error: {}", problems.replace('\n', "\nerror: "));
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

fn simulate(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let loaded = load(args.scenario.scenario.as_deref(), &args.scenario.overrides)?;
    let show_progress = args.progress || std::io::stderr().is_terminal();
    let mut simulation = Simulation::new(&loaded.scenario, loaded.options);
    if show_progress {
        simulation.on_progress(progress_printer());
    }
    let started = Instant::now();
    let result = simulation.finish();
    if let Some(reason) = &result.node_limit_exceeded {
        anyhow::bail!(
            "scenario {:?}: the run stopped: {reason}; give the groups smaller sizes or set the \
             max-nodes-total option",
            result.summary.scenario
        );
    }
    if show_progress {
        let clear = if std::io::stderr().is_terminal() {
            "\r\x1b[2K"
        } else {
            ""
        };
        eprintln!(
            "{clear}simulated {} in {:.1} s of wall-clock time ({} loops)",
            format_duration(Duration::from_secs(result.summary.simulated_seconds)),
            started.elapsed().as_secs_f64(),
            result.summary.loops
        );
    }

    if let Some(path) = &args.report {
        std::fs::write(path, render_html(&result))
            .with_context(|| format!("cannot write the HTML report to {}", path.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    let rendered = match args.output {
        OutputFormat::Text => render_text(&result),
        OutputFormat::Json => render_json(&result) + "\n",
    };
    stdout
        .write_all(rendered.as_bytes())
        .context("cannot write to standard output")?;
    stdout.flush().context("cannot write to standard output")?;

    let failures: Vec<_> = result
        .summary
        .expectations
        .iter()
        .filter(|e| !e.ok)
        .collect();
    if failures.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for failure in failures {
        eprintln!(
            "expectation failed: {} (observed {})",
            failure.description, failure.observed
        );
    }
    Ok(ExitCode::from(EXIT_EXPECTATION_FAILED))
}

fn explain_command(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let loaded = load(args.scenario.scenario.as_deref(), &args.scenario.overrides)?;
    let when = args.at.map_or(ExplainAt::FirstPending, ExplainAt::Time);
    let explanation = explain(&loaded.scenario, loaded.options, when);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(render_explanation(&explanation).as_bytes())
        .context("cannot write to standard output")?;
    Ok(ExitCode::SUCCESS)
}

/// Prints progress at most about once per wall-clock second, on one line when standard error is a
/// terminal.
fn progress_printer() -> impl FnMut(&Progress) {
    let terminal = std::io::stderr().is_terminal();
    let mut last: Option<Instant> = None;
    move |p: &Progress| {
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        last = Some(Instant::now());
        let line = format!(
            "simulated {} of {} · {} loops · {} nodes · {} pending pods",
            format_duration(p.simulated),
            format_duration(p.total),
            p.loops,
            p.nodes,
            p.pending_pods
        );
        if terminal {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn overrides_accept_optional_dashes() {
        assert_eq!(
            parse_override("--expander=most-pods").unwrap(),
            ("expander".to_string(), "most-pods".to_string())
        );
        assert_eq!(
            parse_override("max-nodes-total=5").unwrap(),
            ("max-nodes-total".to_string(), "5".to_string())
        );
        assert!(parse_override("expander").is_err());
        assert!(parse_override("=5").is_err());
    }
}
