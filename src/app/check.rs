//! `sandbox-run check`: the gate's verdict on a command, nothing run.

use super::resolve::{allow_programs, gate, load_profile, verdict_line};
use super::Fail;
use crate::cli::CheckArgs;

pub(super) fn check(args: CheckArgs) -> Result<i32, Fail> {
    let mut profile = load_profile(&args.target.profile)?;
    allow_programs(&mut profile, &args.target.allow_program)?;
    let (v, _) = gate(&args.target, &profile)?;
    if args.json {
        let json = serde_json::json!({
            "allowed": v.allowed(),
            "outcome": v.outcome,
            "rule": v.rule,
            "word": v.word,
            "program": v.program,
            "reason": v.reason,
            "argv": v.argv,
            "profile": profile.name,
        });
        println!("{json}");
    } else {
        println!("{}", verdict_line(&v));
    }
    Ok(v.exit_code())
}
