# A Moodle CodeRunner question's template (Python 3; Template grader, "Is combinator"
# ticked), written by `cargo checker autograder coderunner` for @GRADE@; course commit
# @COMMIT@. It writes the student's answer (step @STEP@'s main.rs) to a folder, grades
# it with the checker installed on the Jobe server, and prints the checker's
# combinator-grader outcome: one JSON object.
#
# DDP_LAB_COURSE names the course on the Jobe server (default /opt/ddp-lab) and
# DDP_LAB_CHECKER its built checker (default target/debug/checker in the course).
import json
import os
import subprocess
import tempfile

ANSWER = """{{ STUDENT_ANSWER | e('py') }}"""
COURSE = os.environ.get("DDP_LAB_COURSE", "/opt/ddp-lab")
CHECKER = os.environ.get("DDP_LAB_CHECKER", os.path.join(COURSE, "target/debug/checker"))

with tempfile.TemporaryDirectory() as work:
    crate = os.path.join(work, "src")
    os.mkdir(crate)
    with open(os.path.join(crate, "main.rs"), "w") as f:
        f.write(ANSWER)
    outcome = os.path.join(work, "outcome.json")
    # Jobe's runguard allows no namespaces, so there is no bubblewrap sandbox here: the
    # program runs unconfined, under Jobe's own limits, and the outcome says so.
    run = subprocess.run(
        [CHECKER, "grade", @GRADE_WORDS@, "--crate", work, "--unsandboxed-fallback",
         "--coderunner", outcome],
        cwd=COURSE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    if os.path.exists(outcome) and os.path.getsize(outcome) > 0:
        with open(outcome) as f:
            print(json.dumps(json.load(f)))
    else:
        # CodeRunner shows the prologue to the student; the checker's own error is there.
        escaped = run.stdout[-4000:].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        print(json.dumps({
            "fraction": 0.0,
            "prologuehtml": "<p>The grader could not grade this answer:</p><pre>" + escaped + "</pre>",
        }))
