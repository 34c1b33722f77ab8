#!/usr/bin/env bats
# bin/help and the `# Summary:` / `# Usage:` header convention of every command in bin/.

load ../test_helper

@test "every command in bin/ has a Summary and a Usage line, and --help prints them" {
  local cmd count=0
  for cmd in "$REPO_ROOT"/bin/*; do
    [[ -x $cmd ]] || continue
    grep -q '^# Summary: .' "$cmd" || flunk "$(basename "$cmd") has no '# Summary:' line"
    grep -q '^# Usage: .' "$cmd" || flunk "$(basename "$cmd") has no '# Usage:' line"
    run -0 "$cmd" --help
    [[ ${lines[0]} == "Summary: "* ]] || flunk "$(basename "$cmd") --help: $output"
    assert_output_contains "Usage: "
    count=$((count + 1))
  done
  ((count >= 2))
}

@test "bin/help lists every command with its summary" {
  run -0 "$REPO_ROOT/bin/help"
  assert_line "  train      Validate an env file, render runs/<EXP_ID>/train.sh, and run it"
  assert_line "  help       List the toolkit's commands with their one-line summaries"
  local cmd
  for cmd in "$REPO_ROOT"/bin/*; do
    [[ -x $cmd ]] || continue
    assert_output_contains "  $(basename "$cmd") "
  done
}

@test "bin/help COMMAND prints that command's help; an unknown command is an error" {
  run -0 "$REPO_ROOT/bin/help" train
  assert_line "Usage: bin/train [--dry-run | --render-only] [--variant sync|async] [--set KEY=VALUE]... ENV_FILE [-- SLIME_FLAG...]"
  run -2 "$REPO_ROOT/bin/help" nope
  assert_output "bin/help: no such command: nope (run bin/help for the list)"
}
