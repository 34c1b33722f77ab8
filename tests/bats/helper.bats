#!/usr/bin/env bats
# The test helper itself: stubs record argv exactly, assertions fail when they should.

load ../test_helper

@test "a stub records its argv with quoting that round-trips" {
  stub ray
  ray start --head "a b" 'q"uote'
  run calls ray
  assert_output 'ray start --head a\ b q\"uote'
}

@test "a stub runs its body and the exit status reaches the caller" {
  stub nvidia-smi 'echo "GPU 0"; exit 3'
  run -3 nvidia-smi -L
  assert_output "GPU 0"
}

@test "assert_calls fails on a different call sequence" {
  stub ray
  ray stop
  run assert_calls <<<"ray start"
  assert_failure
}

@test "the environment is sealed" {
  [[ -z ${TOOLKIT_DEBUG:-} ]]
  [[ $HOME == "$BATS_TEST_TMPDIR/home" ]]
  [[ $PATH == "$STUB_DIR:"* ]]
  # the run locks are the test's own, never those of the user's real runs on this node
  [[ $TOOLKIT_RUNTIME_DIR == "$BATS_TEST_TMPDIR/rt" ]]
}
