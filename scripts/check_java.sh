#!/bin/sh
# The Spark bridge (and its tests) need Java 17 or newer. Use JAVA_HOME if set, else `java` on
# PATH; when neither is 17+, install Debian's headless JRE 17 if we are root with apt-get,
# otherwise fail with what to do (the Spark tests cannot run without it).
set -eu
java_bin() {
    if [ -n "${JAVA_HOME:-}" ]; then echo "$JAVA_HOME/bin/java"; else command -v java || true; fi
}
major() {
    "$1" -version 2>&1 | head -1 | sed -E 's/.*version "([0-9]+)(\.[^"]*)?".*/\1/'
}
JAVA=$(java_bin)
if [ -n "$JAVA" ] && [ -x "$JAVA" ] && [ "$(major "$JAVA")" -ge 17 ] 2>/dev/null; then
    echo "java: $("$JAVA" -version 2>&1 | head -1)"
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    echo "java: installed $(java -version 2>&1 | head -1)"
    exit 0
fi
echo "java: the Spark bridge needs Java 17+; found '${JAVA:-none}'. Install a JDK/JRE 17 or set JAVA_HOME." >&2
exit 1
