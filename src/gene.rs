//! Genes, as in the seed's evolution engine: `{"type": "Gene", "id": ..., "validation": [...]}`.
//! Read with hard limits so a hostile gene file cannot make sandbox-run read 100 MB or queue
//! ten thousand sandboxes: anything malformed is one clear line and exit 125.

use serde::Deserialize;
use std::io::Read;
use std::path::Path;

/// Larger gene files are refused without being read whole.
pub const MAX_BYTES: u64 = 1 << 20;
/// More validation commands than this are refused.
pub const MAX_COMMANDS: usize = 64;
/// A longer command string is refused (the gate's own limit is higher; a gene needs less).
pub const MAX_COMMAND_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gene {
    pub id: String,
    pub validation: Vec<String>,
}

#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "type")]
    kind: Option<String>,
    id: Option<serde_json::Value>,
    validation: Option<serde_json::Value>,
}

impl Gene {
    pub fn load(path: &Path) -> Result<Gene, String> {
        let at = |e: String| format!("gene {}: {e}", path.display());
        let f = std::fs::File::open(path).map_err(|e| at(e.to_string()))?;
        let mut text = Vec::new();
        f.take(MAX_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|e| at(e.to_string()))?;
        if text.len() as u64 > MAX_BYTES {
            return Err(at(format!("larger than {MAX_BYTES} bytes")));
        }
        Gene::parse(&text).map_err(at)
    }

    pub fn parse(text: &[u8]) -> Result<Gene, String> {
        let raw: Raw =
            serde_json::from_slice(text).map_err(|e| format!("not a JSON object: {e}"))?;
        if let Some(k) = raw.kind.as_deref() {
            if k != "Gene" {
                return Err(format!("\"type\" is {k:?}, expected \"Gene\""));
            }
        }
        let id = match raw.id {
            Some(serde_json::Value::String(s))
                if !s.trim().is_empty() && s.len() <= 256 && !s.chars().any(char::is_control) =>
            {
                s
            }
            Some(serde_json::Value::String(_)) => {
                return Err("\"id\" must be 1-256 printable characters".into())
            }
            Some(_) => return Err("\"id\" must be a string".into()),
            None => return Err("no \"id\"".into()),
        };
        let list = match raw.validation {
            Some(serde_json::Value::Array(a)) => a,
            Some(_) => return Err("\"validation\" must be an array of command strings".into()),
            None => return Err("no \"validation\" array".into()),
        };
        if list.is_empty() {
            return Err("\"validation\" is empty: nothing to validate".into());
        }
        if list.len() > MAX_COMMANDS {
            return Err(format!(
                "\"validation\" has {} commands; at most {MAX_COMMANDS}",
                list.len()
            ));
        }
        let mut validation = Vec::with_capacity(list.len());
        for (i, v) in list.into_iter().enumerate() {
            let serde_json::Value::String(c) = v else {
                return Err(format!("validation[{i}] is not a string"));
            };
            let c = c.trim().to_string();
            if c.is_empty() {
                return Err(format!("validation[{i}] is an empty command"));
            }
            if c.len() > MAX_COMMAND_BYTES {
                return Err(format!(
                    "validation[{i}] is longer than {MAX_COMMAND_BYTES} bytes"
                ));
            }
            validation.push(c);
        }
        Ok(Gene { id, validation })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_seed_gene() {
        let g = Gene::parse(
            br#"{"type":"Gene","id":"gene_safe_validation","category":"repair",
            "validation":["node scripts/validate-modules.js ./src","npm test","npx eslint src/"]}"#,
        )
        .unwrap();
        assert_eq!(g.id, "gene_safe_validation");
        assert_eq!(
            g.validation,
            [
                "node scripts/validate-modules.js ./src",
                "npm test",
                "npx eslint src/"
            ]
        );
    }

    #[test]
    fn malformed_genes_say_why_on_one_line() {
        let many = format!(
            r#"{{"id":"g","validation":[{}]}}"#,
            vec!["\"npm test\""; 10_000].join(",")
        );
        let long = format!(
            r#"{{"id":"g","validation":["npm test {}"]}}"#,
            "a".repeat(MAX_COMMAND_BYTES)
        );
        for (text, needle) in [
            ("not json", "not a JSON object"),
            ("[1,2]", "not a JSON object"),
            (r#"{"id":"g"}"#, "no \"validation\""),
            (r#"{"id":"g","validation":"npm test"}"#, "must be an array"),
            (r#"{"id":"g","validation":[]}"#, "empty"),
            (
                r#"{"id":"g","validation":["npm test", 7]}"#,
                "validation[1] is not a string",
            ),
            (
                r#"{"id":"g","validation":["  "]}"#,
                "validation[0] is an empty command",
            ),
            (r#"{"validation":["npm test"]}"#, "no \"id\""),
            (
                r#"{"id":5,"validation":["npm test"]}"#,
                "\"id\" must be a string",
            ),
            (
                r#"{"type":"Capsule","id":"g","validation":["npm test"]}"#,
                "expected \"Gene\"",
            ),
            (many.as_str(), "at most 64"),
            (long.as_str(), "longer than"),
        ] {
            let e = Gene::parse(text.as_bytes()).unwrap_err();
            assert!(e.contains(needle), "{text:.40}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_100_mb_file_is_refused_without_reading_it() {
        let dir = std::env::temp_dir().join(format!("gene-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("big.json");
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(100 << 20).unwrap(); // sparse: costs no disk
        let t = std::time::Instant::now();
        let e = Gene::load(&p).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        assert!(t.elapsed().as_secs() < 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
