// The one source of kiln_test_pch, the target that builds the tests' shared precompiled header
// (tests/CMakeLists.txt); it defines nothing.
