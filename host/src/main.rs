//! The `jobhost` command: run a host, build and scaffold plugins, and operate a running
//! host. See the README's CLI reference, or `jobhost help`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    cli::init_logging(&args);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(cli::EXIT_FAILED);
        }
    };
    match runtime.block_on(cli::run(args)) {
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
