// KILN_TLS: the initial-exec TLS model for thread-locals on the per-op hot path (dispatch, the
// allocator's front cache): a direct %fs-relative access instead of a __tls_get_addr call each
// time (about 100 instructions per small eager op). libkiln is linked at program start, where
// that model is valid; it would not be for a library dlopen'ed late into a process short of
// static TLS space.
#pragma once
#define KILN_TLS __attribute__((tls_model("initial-exec")))
