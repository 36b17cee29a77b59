#pragma once
// The malloc that serves the whole process, the PJRT plugin's allocations included. titan's
// programs link gperftools' tcmalloc (cmake/dependencies.cmake says why); sanitizer builds keep
// the sanitizer's, and a program linked without it gets glibc's.
#include <string>

namespace titan {

// "tcmalloc (gperftools <version>)" when malloc resolves to tcmalloc, "glibc malloc" otherwise.
std::string process_malloc();

// Hands the free memory that malloc keeps back to the system (tcmalloc's ReleaseFreeMemory,
// glibc's malloc_trim): what a benchmark does before it measures RSS growth.
void release_free_memory();

}  // namespace titan
