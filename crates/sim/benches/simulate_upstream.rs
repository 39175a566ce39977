//! Wall time of whole simulations of the bundled upstream scalability scenarios (1,000 nodes,
//! ~30,000 pods): parsing, the simulated cluster and cloud, and every engine loop. Prints the wall
//! time of each run and the summary's per-loop decide time.
//!
//! Run with `cargo bench -p ferroscale-sim --bench simulate_upstream`.

use std::path::Path;
use std::time::Instant;

use ferroscale_sim::runner::{options_for, simulate};
use ferroscale_sim::scenario::{bundled, parse_scenario};

const RUNS: usize = 3;

fn main() {
    for name in ["upstream-1", "upstream-2", "upstream-6"] {
        let Some(text) = bundled(name) else {
            eprintln!("simulate_upstream: bundled scenario {name} is missing");
            std::process::exit(1);
        };
        let mut walls = Vec::with_capacity(RUNS);
        let mut last = None;
        for _ in 0..RUNS {
            let started = Instant::now();
            let scenario = match parse_scenario(text, name, Path::new(".")) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("simulate_upstream: {e}");
                    std::process::exit(1);
                }
            };
            let options = match options_for(&scenario, &[]) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("simulate_upstream: {e}");
                    std::process::exit(1);
                }
            };
            let result = simulate(&scenario, options);
            walls.push(started.elapsed().as_secs_f64());
            last = Some(result.summary);
        }
        walls.sort_by(f64::total_cmp);
        if let Some(summary) = last {
            println!(
                "simulate_upstream: {name}: {} simulated s, {} loops, wall median {:.2} s (min {:.2}, max {:.2}); decide ms p50 {} p99 {} max {}; expectations hold: {}",
                summary.simulated_seconds,
                summary.loops,
                walls[walls.len() / 2],
                walls[0],
                walls[walls.len() - 1],
                summary.decide_millis.p50,
                summary.decide_millis.p99,
                summary.decide_millis.max,
                summary.all_expectations_hold()
            );
        }
    }
}
