#!/usr/bin/env bash
# The room page's JavaScript checks: the type checker over static/*.js (tsconfig.json: each
# module is `// @ts-check` with JSDoc types; tsc emits nothing, the page has no build step),
# then the unit tests of its pure functions (tests/page/js/*.test.mjs, Node's test runner).
# TypeScript is a devDependency (package.json): `npm ci` first. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x node_modules/.bin/tsc ]; then
  echo "dev.d/check-js.sh: TypeScript is not installed: run \`npm ci\` first" >&2
  exit 1
fi
npx --no -- tsc --noEmit -p tsconfig.json
node --test --test-reporter=dot tests/page/js/*.test.mjs
