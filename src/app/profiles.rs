//! `sandbox-run profiles [list|show [--resolved] NAME]`.

use super::Fail;
use crate::cli::ProfilesAction;
use crate::profile::Loader;

pub(super) fn profiles(action: ProfilesAction) -> Result<i32, Fail> {
    let loader = Loader::from_env();
    match action {
        ProfilesAction::List => {
            for (name, src) in loader.list() {
                let desc = loader
                    .load(&name)
                    .map(|p| p.description)
                    .unwrap_or_else(|e| format!("(invalid: {e})"));
                println!("{name:<14} {src:<40} {desc}");
            }
        }
        ProfilesAction::Show { name, resolved } => {
            let (p, chain) = loader.load_chain(&name).map_err(|e| Fail {
                hint: super::resolve::did_you_mean(&loader, &name, ""),
                ..Fail::usage(e.0)
            })?;
            if resolved {
                print!("{}", crate::profile::resolved::render(&p, &chain));
            } else {
                print!("{}", p.to_toml());
            }
        }
    }
    Ok(0)
}
