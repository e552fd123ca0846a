//! `sandbox-run doctor`: the host check ([`crate::doctor`]), as text, JSON or the README's table.

pub(super) fn doctor(json: bool, requirements_md: bool) -> i32 {
    if requirements_md {
        print!("{}", crate::doctor::requirements_markdown());
        return 0;
    }
    let d = crate::doctor::diagnose();
    if json {
        println!("{}", serde_json::to_string_pretty(&d).unwrap_or_default());
        crate::doctor::exit_code(&d)
    } else {
        crate::doctor::print(&d)
    }
}
