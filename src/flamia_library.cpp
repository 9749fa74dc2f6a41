// libflamia.so: the C API (src/api) and the kernels (src/kernels), linked whole. This file only
// gives the shared library a translation unit of its own.
#include "flamia/flamia.h"
