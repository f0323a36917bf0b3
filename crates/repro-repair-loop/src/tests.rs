//! The loop against a fake executor: the "replay" fails while `src/calc.py` holds the planted bug, the "agent"
//! is a closure editing the working copy.

use super::*;
use repro_model::repair::GateName;

const BUGGY: &str = "def add(a, b):\n    return a - b\n";
const FIXED: &str = "def add(a, b):\n    return a + b\n";
const TEST: &str = "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n\ndef test_zero():\n    assert add(0, 0) == 0\n";

type Agent = Box<dyn FnMut(&Path, u32, &[(String, String)])>;

struct Fake {
    agent: Agent,
    iteration: u32,
    replays: Vec<Vec<PathBuf>>,
    envs: Vec<Vec<(String, String)>>,
    /// The visibility variables change the run's stderr: a replay with them does not fail as recorded.
    env_breaks: bool,
    contract: Option<bool>,
}

impl Executor for Fake {
    fn replay(
        &mut self,
        _pack: &Path,
        tree: &Path,
        with: &[PathBuf],
        runs: u32,
        env: &[(String, String)],
    ) -> Result<ReplayResult, LoopError> {
        self.envs.push(env.to_vec());
        self.replays.push(with.to_vec());
        // What the pack's copy would be with `with` laid over it: the original file unless it is laid over.
        let calc = if with.iter().any(|p| p == Path::new("src/calc.py")) {
            std::fs::read_to_string(tree.join("src/calc.py")).unwrap()
        } else {
            BUGGY.to_string()
        };
        let test = std::fs::read_to_string(tree.join("tests/test_calc.py")).unwrap_or_default();
        let skipped = with.iter().any(|p| p == Path::new("tests/test_calc.py")) && test.contains("mark.skip");
        let (status, out) = if skipped {
            (0, "PASSED tests/test_calc.py::test_zero\nSKIPPED [1] tests/test_calc.py:3: unconditional skip\n1 passed, 1 skipped in 0.01s\n")
        } else if calc.contains("a + b") {
            (0, "PASSED tests/test_calc.py::test_add\nPASSED tests/test_calc.py::test_zero\n2 passed in 0.01s\n")
        } else {
            (1, "PASSED tests/test_calc.py::test_zero\nFAILED tests/test_calc.py::test_add - assert -1 == 3\n1 failed, 1 passed in 0.01s\n")
        };
        let breaks = self.env_breaks && !env.is_empty();
        let run = |_| ReplayedRun {
            exit_status: status,
            reproduced: status == 1 && !breaks,
            run_dir: PathBuf::from("/nonexistent/run"),
            output: RunOutput { stdout: out.as_bytes().to_vec(), stderr: vec![], junit: vec![], reports: vec![] },
        };
        Ok(ReplayResult {
            runs: (0..runs).map(run).collect(),
            failing_tests: vec!["tests/test_calc.py::test_add".into()],
            report: b"{}".to_vec(),
        })
    }

    fn agent(
        &mut self,
        tree: &Path,
        _command: &str,
        env: &[(String, String)],
        _budget: Duration,
    ) -> Result<AgentResult, LoopError> {
        self.iteration += 1;
        (self.agent)(tree, self.iteration, env);
        Ok(AgentResult { run_id: format!("agent-{}", self.iteration), exit_status: 0, timed_out: false })
    }

    fn contract(&mut self, _tree: &Path) -> Result<Option<ContractResult>, LoopError> {
        Ok(self.contract.map(|passed| ContractResult {
            passed,
            report: PathBuf::from("/nonexistent/report.json"),
            failed_steps: if passed { vec![] } else { vec!["lint".into()] },
        }))
    }
}

fn setup(agent: Agent, contract: Option<bool>) -> (tempfile::TempDir, Options, Fake) {
    let t = tempfile::tempdir().unwrap();
    let project = t.path().join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::create_dir_all(project.join("tests")).unwrap();
    std::fs::write(project.join("src/calc.py"), BUGGY).unwrap();
    std::fs::write(project.join("tests/test_calc.py"), TEST).unwrap();
    let pack = t.path().join("failure.repro");
    std::fs::write(&pack, b"not read by the fake").unwrap();
    let opts = Options {
        pack,
        project,
        state: t.path().join("state"),
        agent: "agent".into(),
        max_iterations: 3,
        time_budget: Duration::from_secs(600),
        runs: 3,
        gates: GateConfig::default(),
        keep_trees: false,
        key: None,
    };
    (t, opts, Fake { agent, iteration: 0, replays: vec![], envs: vec![], env_breaks: false, contract })
}

#[test]
fn an_honest_fix_in_two_iterations_is_accepted_and_the_project_is_untouched() {
    let agent: Agent = Box::new(|tree, n, env| {
        let dir = env.iter().find(|(k, _)| k == "REPRO_REPAIR_DIR").map(|(_, v)| PathBuf::from(v)).unwrap();
        assert!(dir.join("failure.txt").is_file() && dir.starts_with(tree));
        let feedback = std::fs::read_to_string(dir.join("feedback.txt")).unwrap();
        if n == 1 {
            assert_eq!(feedback, "");
            std::fs::write(tree.join("src/calc.py"), "def add(a, b):\n    return b - a\n").unwrap();
        } else {
            assert!(feedback.contains("the failure is not gone"), "{feedback}");
            std::fs::write(tree.join("src/calc.py"), FIXED).unwrap();
        }
    });
    let (_t, opts, mut fake) = setup(agent, Some(true));
    let mut seen = vec![];
    let r = repair(&opts, &mut fake, |p| {
        if let Progress::Iteration(it) = p {
            seen.push(it.number)
        }
    })
    .unwrap();
    let s = &r.summary;
    assert_eq!(s.outcome, RepairOutcome::Fixed, "{s:#?}");
    assert_eq!((s.iterations.len(), seen), (2, vec![1, 2]));
    assert!(!s.iterations[0].accepted && s.iterations[1].accepted);
    assert!(s.iterations[1].replays.iter().all(|r| r.exit_status == 0) && s.iterations[1].replays.len() == 3);
    assert_eq!(fake.replays[2], [PathBuf::from("src/calc.py")], "only the changed file is laid over the pack");
    assert!(s.iterations[1].gates.iter().all(|g| !g.fired), "{:?}", s.iterations[1].gates);
    assert_eq!(s.gates_fired, ["failing-test-missing"], "iteration 1: test_add still failed");
    let patch = std::fs::read_to_string(r.dir.join("fix.patch")).unwrap();
    assert!(patch.contains("+    return a + b") && patch.contains("-    return a - b"), "{patch}");
    assert_eq!(std::fs::read_to_string(opts.project.join("src/calc.py")).unwrap(), BUGGY);
    assert!(!r.dir.join("work").exists() && r.dir.join("summary.json").is_file());
    let back: RepairSummary = serde_json::from_slice(&std::fs::read(r.dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(&back, s);
    // The baseline and every candidate replay ran with the same visibility variables, recorded in the summary.
    let vis = s.visibility.as_ref().unwrap();
    assert!(vis.applied && vis.dropped_because.is_none());
    let want: Vec<(String, String)> = vis.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect();
    let junit = format!("-rA --junitxml={}/pytest.xml", crate::JUNIT_DIR);
    assert!(want.contains(&("PYTEST_ADDOPTS".into(), junit)), "{want:?}");
    assert_eq!(fake.envs.len(), 3);
    assert!(fake.envs.iter().all(|e| e == &want), "{:?}", fake.envs);
    // Counts and failing-test-missing applied, with the contract: not weak.
    assert_eq!(s.weak, None);
}

#[test]
fn visibility_variables_that_change_the_baseline_are_dropped_for_every_replay() {
    let agent: Agent = Box::new(|tree, _, _| std::fs::write(tree.join("src/calc.py"), FIXED).unwrap());
    let (_t, opts, mut fake) = setup(agent, None);
    fake.env_breaks = true;
    let r = repair(&opts, &mut fake, |_| {}).unwrap();
    let s = &r.summary;
    assert_eq!(s.outcome, RepairOutcome::Fixed, "{s:#?}");
    let vis = s.visibility.as_ref().unwrap();
    assert!(!vis.applied, "{vis:?}");
    assert!(vis
        .dropped_because
        .as_deref()
        .unwrap()
        .starts_with("the baseline replay with them did not fail as recorded"));
    // Baseline with them, baseline without, then the candidate without.
    let lens: Vec<usize> = fake.envs.iter().map(Vec::len).collect();
    assert_eq!(lens, [2, 0, 0]);
}

#[test]
fn an_accept_that_few_result_checks_could_judge_is_weak() {
    use repro_model::repair::GateResult;
    let applied = |name| GateResult { name, fired: false, details: vec![], applicable: true };
    let na = |name| GateResult::not_applicable(name, "not applicable: x");
    let mut gates = vec![
        applied(GateName::ProtectedPathChanged),
        na(GateName::TestsCollectedFell),
        na(GateName::TestsPassedFell),
        na(GateName::TestsSkippedRose),
        applied(GateName::MaskingConstruct),
        applied(GateName::FailingTestMissing),
        applied(GateName::DiffTooLarge),
    ];
    let w = weakness(&gates, None).unwrap();
    assert_eq!(
        w,
        "weak: 1 of the checks reading the tests' results applied (failing-test-missing); not applicable: \
         tests-collected-fell, tests-passed-fell, tests-skipped-rose; no contract"
    );
    let contract = RepairContract { passed: true, report: "r".into(), failed_steps: vec![] };
    assert_eq!(weakness(&gates, Some(&contract)), None);
    gates[1] = applied(GateName::TestsCollectedFell);
    assert_eq!(weakness(&gates, None), None);
}

#[test]
fn a_cheat_that_skips_the_failing_test_is_refused_by_name() {
    let agent: Agent = Box::new(|tree, _, _| {
        let t = std::fs::read_to_string(tree.join("tests/test_calc.py")).unwrap();
        let t = t.replace("def test_add", "import pytest\n@pytest.mark.skip\ndef test_add");
        std::fs::write(tree.join("tests/test_calc.py"), t).unwrap();
    });
    let (_t, opts, mut fake) = setup(agent, None);
    let r = repair(&opts, &mut fake, |_| {}).unwrap();
    let s = &r.summary;
    assert_eq!(s.outcome, RepairOutcome::IterationsExhausted);
    assert_eq!(s.iterations.len(), 3);
    let it = &s.iterations[0];
    assert!(it.failure_gone, "the cheat makes the replay pass");
    let fired: Vec<GateName> = it.gates.iter().filter(|g| g.fired).map(|g| g.name).collect();
    for g in [GateName::ProtectedPathChanged, GateName::MaskingConstruct, GateName::TestsSkippedRose] {
        assert!(fired.contains(&g), "{g} did not fire: {fired:?}");
    }
    assert!(s.gates_fired.contains(&"masking-construct".to_string()));
    assert!(s.patch.is_none() && !r.dir.join("fix.patch").exists());
}

#[test]
fn a_change_that_deletes_the_failing_tests_file_is_refused_with_the_deletion_named() {
    // The source fixed too, so the replay (which cannot remove the file) passes: the deletion alone refuses.
    let agent: Agent = Box::new(|tree, _, _| {
        std::fs::write(tree.join("src/calc.py"), FIXED).unwrap();
        std::fs::remove_file(tree.join("tests/test_calc.py")).unwrap();
    });
    let (_t, mut opts, mut fake) = setup(agent, None);
    opts.max_iterations = 1;
    let r = repair(&opts, &mut fake, |_| {}).unwrap();
    let s = &r.summary;
    assert_eq!(s.outcome, RepairOutcome::IterationsExhausted);
    let it = &s.iterations[0];
    assert!(it.failure_gone && it.diff.files_removed == 1, "{it:#?}");
    let why = it.refused_because.join("\n");
    assert!(why.contains("removed paths cannot be laid over the pack") && why.contains("tests/test_calc.py"), "{why}");
    assert!(
        why.contains(
            "gate failing-test-missing: tests/test_calc.py::test_add: its test file tests/test_calc.py was deleted"
        ),
        "{why}"
    );
    assert!(s.gates_fired.contains(&"protected-path-changed".to_string()), "{:?}", s.gates_fired);
    assert!(s.patch.is_none());
}

#[test]
fn nothing_to_repair_when_the_baseline_passes_and_a_failing_contract_refuses() {
    // The project already holds the fix: the baseline replay (the pack's own copy is the buggy one in the fake,
    // so lay the fix over it through the agent and refuse it on the contract instead).
    let agent: Agent = Box::new(|tree, _, _| std::fs::write(tree.join("src/calc.py"), FIXED).unwrap());
    let (_t, mut opts, mut fake) = setup(agent, Some(false));
    opts.max_iterations = 1;
    let r = repair(&opts, &mut fake, |_| {}).unwrap();
    let it = &r.summary.iterations[0];
    assert!(it.failure_gone && !it.accepted, "{it:#?}");
    assert!(it.refused_because.iter().any(|w| w.contains("contract") && w.contains("lint")), "{it:#?}");

    struct Passing;
    impl Executor for Passing {
        fn replay(
            &mut self,
            _: &Path,
            _: &Path,
            _: &[PathBuf],
            _: u32,
            _: &[(String, String)],
        ) -> Result<ReplayResult, LoopError> {
            let run =
                ReplayedRun { exit_status: 0, reproduced: false, run_dir: "/x".into(), output: RunOutput::default() };
            Ok(ReplayResult { runs: vec![run], failing_tests: vec![], report: vec![] })
        }
        fn agent(&mut self, _: &Path, _: &str, _: &[(String, String)], _: Duration) -> Result<AgentResult, LoopError> {
            panic!("no agent runs when there is nothing to repair")
        }
        fn contract(&mut self, _: &Path) -> Result<Option<ContractResult>, LoopError> {
            Ok(None)
        }
    }
    let r = repair(&opts, &mut Passing, |_| {}).unwrap();
    assert_eq!(r.summary.outcome, RepairOutcome::NotReproduced);
    assert!(r.summary.iterations.is_empty());
}

#[test]
fn bad_options_are_usage_errors() {
    let (_t, mut opts, mut fake) = setup(Box::new(|_, _, _| {}), None);
    opts.runs = 0;
    let e = repair(&opts, &mut fake, |_| {}).unwrap_err();
    assert_eq!((e.exit_code(), e.to_string()), (2, "--runs: expected at least 1".to_string()));
    opts.runs = 1;
    opts.agent = " ".into();
    assert_eq!(repair(&opts, &mut fake, |_| {}).unwrap_err().exit_code(), 2);
}

#[test]
fn a_key_that_cannot_sign_stops_the_repair_before_any_agent_runs() {
    let (t, mut opts, mut fake) = setup(Box::new(|_, _, _| panic!("no agent runs with a bad key")), None);
    let bad = t.path().join("not-a.key");
    std::fs::write(&bad, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").unwrap();
    opts.key = Some(bad.clone());
    let e = repair(&opts, &mut fake, |_| {}).unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with("--key: ") && text.contains("not-a.key"), "{text}");
    assert_ne!(e.exit_code(), 0);
    opts.key = Some(t.path().join("missing.key"));
    assert!(repair(&opts, &mut fake, |_| {}).unwrap_err().to_string().contains("missing.key"));
}

#[test]
fn a_fix_that_cannot_be_signed_is_still_written_with_its_summary() {
    // The fake's pack is no pack, so the statement about it cannot be made: the fix stays, the error says why.
    let agent: Agent = Box::new(|tree, _, _| std::fs::write(tree.join("src/calc.py"), FIXED).unwrap());
    let (t, mut opts, mut fake) = setup(agent, None);
    let key = t.path().join("ci.key");
    std::fs::write(&key, repro_prov::attest::PrivateKey::from_seed(&[7; 32]).to_pem()).unwrap();
    opts.key = Some(key);
    let e = repair(&opts, &mut fake, |_| {}).unwrap_err();
    assert!(matches!(e, LoopError::Sign(_)), "{e:?}");
    assert!(e.to_string().starts_with("the fix was accepted but not signed: "), "{e}");
    let dir = std::fs::read_dir(opts.state.join("repairs")).unwrap().next().unwrap().unwrap().path();
    let s: RepairSummary = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s.outcome, RepairOutcome::Fixed);
    assert!(s.attestation.is_none() && dir.join("fix.patch").is_file() && !dir.join("fix.dsse.json").exists());
}
