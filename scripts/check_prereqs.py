"""Check what a fresh machine must already have: Python 3.11+ and a Java 17+ JDK (Spark runs on the JVM;
`javac` builds Baton's own JVM operators, e.g. the event-time state TTL). Standard library only: this
runs before the project's virtualenv exists."""

import re
import shutil
import subprocess
import sys

problems = []
if sys.version_info < (3, 11):
    problems.append(
        f"Python 3.11 or newer is required; {sys.executable} is {sys.version.split()[0]}. "
        "Run make with PYTHON=/path/to/python3.11"
    )
java = shutil.which("java")
if java is None:
    problems.append(
        "Java 17 or newer is required for Spark and was not found on PATH "
        "(Debian/Ubuntu: apt-get install openjdk-17-jdk-headless)"
    )
else:
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if major == 1 and m.group(2):  # "1.8.0" style
        major = int(m.group(2))
    if major < 17:
        problems.append(
            f"Java 17 or newer is required for Spark; {java} reports: {out.splitlines()[0] if out else '?'}"
        )
if java is not None and shutil.which("javac") is None:
    problems.append(
        "a Java 17+ JDK is required: javac was not found on PATH (Baton compiles its JVM operators "
        "with it; Debian/Ubuntu: apt-get install openjdk-17-jdk-headless)"
    )
if problems:
    print("Missing prerequisites:\n  - " + "\n  - ".join(problems), file=sys.stderr)
    sys.exit(2)
