# Checks kiln/'s include graph (cmake -P, run by ctest): every #include "kiln/<folder>/..." goes to
# the same folder or a lower layer, and kiln/kiln.h (the public API) reaches no internal header.
# Usage: cmake -DSRC=<repo root> -P check_layers.cmake
cmake_minimum_required(VERSION 3.25)

# Bottom to top; folders on one line are one layer and may not include each other.
set(KILN_LAYERS
  "core"
  "kernels"
  "registry"
  "dispatch"
  "ops"
  "autograd"
  "graph"
  "codegen"
  "passes"
  "exec"
  "nn;optim;io"
  "jit"
  "onnx;dist")
# Headers kiln.h must not reach, directly or through other headers.
set(KILN_INTERNAL_HEADERS
  "kiln/registry/.*" "kiln/kernels/.*" "kiln/passes/.*" "kiln/codegen/.*"
  "kiln/core/(host_read|interrupt)\\.h" "kiln/dispatch/(dispatch|profile)\\.h"
  "kiln/graph/node\\.h" "kiln/autograd/grad_node\\.h"
  "kiln/ops/(op_util|handles|grad_ops|fused|elementwise_util|index_util)\\.h"
  "kiln/ops/(pool_util|reduce_util|collective|traced_write)\\.h"
  "kiln/jit/(arg|capture|compiled_backward|engine|guard_key|heal|lazy|lazy_piece)\\.h"
  "kiln/jit/(replay|shape_guard|trace_tree|tracer|version)\\.h" "kiln/exec/while_body\\.h")

set(layer_index 0)
foreach(layer ${KILN_LAYERS})
  string(REPLACE ";" " " members "${layer}")
  separate_arguments(members UNIX_COMMAND "${members}")
  foreach(folder ${members})
    set(LAYER_OF_${folder} ${layer_index})
  endforeach()
  math(EXPR layer_index "${layer_index} + 1")
endforeach()

file(GLOB_RECURSE sources RELATIVE "${SRC}" "${SRC}/kiln/*.h" "${SRC}/kiln/*.cpp")
set(violations "")
set(edges 0)
foreach(f ${sources})
  if(NOT f MATCHES "^kiln/([a-z_]+)/")
    continue()  # kiln/kiln.h sits above every layer
  endif()
  set(from ${CMAKE_MATCH_1})
  if(NOT DEFINED LAYER_OF_${from})
    string(APPEND violations "\n  ${f}: folder '${from}' has no layer in check_layers.cmake")
    continue()
  endif()
  file(STRINGS "${SRC}/${f}" includes REGEX "^#include \"kiln/[a-z_]+/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"kiln/([a-z_]+)/.*$" "\\1" to "${line}")
    math(EXPR edges "${edges} + 1")
    if(to STREQUAL from)
      continue()
    endif()
    if(NOT DEFINED LAYER_OF_${to})
      string(APPEND violations "\n  ${f}: includes unknown folder '${to}'")
    elseif(NOT LAYER_OF_${to} LESS LAYER_OF_${from})
      string(APPEND violations "\n  ${f} (${from}) -> ${to}: includes a folder at or above its own layer")
    endif()
  endforeach()
endforeach()

# kiln.h's include closure.
set(seen "")
set(queue "kiln/kiln.h")
while(queue)
  list(POP_FRONT queue h)
  if(h IN_LIST seen)
    continue()
  endif()
  list(APPEND seen "${h}")
  if(NOT EXISTS "${SRC}/${h}")
    continue()
  endif()
  file(STRINGS "${SRC}/${h}" includes REGEX "^#include \"kiln/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"(kiln/[^\"]+)\".*$" "\\1" inc "${line}")
    list(APPEND queue "${inc}")
  endforeach()
endwhile()
foreach(h ${seen})
  foreach(pattern ${KILN_INTERNAL_HEADERS})
    if(h MATCHES "^${pattern}$")
      string(APPEND violations "\n  kiln/kiln.h reaches internal header ${h}")
    endif()
  endforeach()
endforeach()

list(LENGTH sources nfiles)
list(LENGTH seen npublic)
if(violations)
  message(FATAL_ERROR "[layers] include graph violations:${violations}")
endif()
message(STATUS "[layers] ${nfiles} files, ${edges} kiln includes, every arrow runs down; "
               "kiln.h reaches ${npublic} headers, none internal")
