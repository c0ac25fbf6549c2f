# Defines kbrl::faiss (FAISS, for dense retrieval: rag::DenseIndex) where FAISS is installed:
# faiss/IndexFlat.h and libfaiss. Debian 12's libfaiss-dev (1.7.3) ships a static libfaiss.a
# (built with -fPIC, GCC's OpenMP, the reference BLAS and LAPACK), which then needs those too.
# Its own CMake package is not used: its target pulls in FindOpenMP's absolute path to GCC's
# libgomp.so, which CMake then reports as hidden by the libgomp.so.1 inside the torch wheel for
# every program that links both; GCC's linker finds libgomp by name (-lgomp), and at run time
# either copy serves (the wheel's exports every GOMP symbol version FAISS 1.7.3 uses).
# Used by the build (cmake/KbrlDependencies.cmake) and by the installed kbrlConfig.cmake alike.
if(NOT TARGET kbrl::faiss)
  find_path(KBRL_FAISS_INCLUDE_DIR faiss/IndexFlat.h)
  find_library(KBRL_FAISS_LIBRARY NAMES faiss)
  if(KBRL_FAISS_INCLUDE_DIR AND KBRL_FAISS_LIBRARY)
    set(_kbrl_faiss_links "${KBRL_FAISS_LIBRARY}")
    if(KBRL_FAISS_LIBRARY MATCHES "\\.a$")
      find_package(LAPACK QUIET)
      find_package(BLAS QUIET)
      if(LAPACK_FOUND AND BLAS_FOUND)
        list(APPEND _kbrl_faiss_links gomp ${LAPACK_LIBRARIES} ${BLAS_LIBRARIES})
      else()
        set(_kbrl_faiss_links "")
        message(STATUS "kbrl: ${KBRL_FAISS_LIBRARY} is a static library and needs BLAS and LAPACK, not found")
      endif()
    endif()
    if(_kbrl_faiss_links)
      add_library(kbrl::faiss INTERFACE IMPORTED)
      set_target_properties(kbrl::faiss PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${KBRL_FAISS_INCLUDE_DIR}"
                                                   INTERFACE_LINK_LIBRARIES "${_kbrl_faiss_links}")
      set(KBRL_FAISS_DESCRIPTION "FAISS (${KBRL_FAISS_INCLUDE_DIR}/faiss, ${KBRL_FAISS_LIBRARY})")
    endif()
  endif()
endif()
