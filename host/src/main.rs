//! The `jobhost` command: run a host, build and scaffold plugins, and operate a running
//! host. See docs/cli.md, or `jobhost help`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let runtime = match args.runtime() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(cli::EXIT_FAILED);
        }
    };
    let telemetry = match cli::init_logging(&args, runtime.handle()) {
        Ok(telemetry) => telemetry,
        Err(err) => {
            eprintln!("error: {err:#}");
            return ExitCode::from(cli::EXIT_FAILED);
        }
    };
    let result = runtime.block_on(cli::run(args));
    // Outside the runtime's threads, because the last export waits for the collector.
    telemetry.shutdown();
    // Because a plugin load abandoned at shutdown may still be waiting out its deadline on
    // a blocking thread, exiting does not wait for the runtime's blocking threads.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let diagnosis = cli::diagnose(&err);
            eprintln!("error: {err:#}");
            if let Some(hint) = diagnosis.hint {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(diagnosis.code)
        }
    }
}
