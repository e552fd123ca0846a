//! Every report a test produces is validated against `schemas/report.schema.json`.

pub fn assert_valid_report(report: &serde_json::Value) {
    let text = include_str!("../../schemas/report.schema.json");
    let schema: serde_json::Value = serde_json::from_str(text).expect("the schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "report does not match schemas/report.schema.json: {errors:?}\n{report:#}"
    );
}
