// The source of loom_test_pch (tests/CMakeLists.txt): the target exists to build the tests'
// precompiled header once; GoogleTest's main, with no tests, is its program.
