/* SPDX-License-Identifier: MIT */
/*
 * How every public header of libubtrfs opens and closes its declarations.
 *
 * The library is built with -fvisibility=hidden: its internal functions (the
 * layers' own, whatever their prefix) stay out of the shared library's symbol
 * table, so no program can come to depend on them. A function or object is
 * exported exactly when it is declared between UB_API_BEGIN and UB_API_END in
 * a header of include/ubtrfs/ (its definition sees that declaration, as the
 * library's .c files include their public header). Marking whole headers,
 * rather than each declaration, means a declaration added to a public header
 * is exported without anyone remembering to: the public headers are the API.
 *
 * For C++ callers the same marks give the declarations C linkage.
 */
#ifndef UBTRFS_API_H
#define UBTRFS_API_H

#if defined(__GNUC__) /* gcc and clang */
#define UB_VISIBILITY_PUSH _Pragma("GCC visibility push(default)")
#define UB_VISIBILITY_POP _Pragma("GCC visibility pop")
#else
#define UB_VISIBILITY_PUSH
#define UB_VISIBILITY_POP
#endif

#ifdef __cplusplus
#define UB_API_BEGIN extern "C" { UB_VISIBILITY_PUSH
#define UB_API_END UB_VISIBILITY_POP }
#else
#define UB_API_BEGIN UB_VISIBILITY_PUSH
#define UB_API_END UB_VISIBILITY_POP
#endif

/* C11's _Static_assert is C++11's static_assert: the layout checks hold for both. */
#ifdef __cplusplus
#define UB_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define UB_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#endif
