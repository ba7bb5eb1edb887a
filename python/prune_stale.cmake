# Removes .py files from the built package that no longer exist in the
# source tree (renamed or deleted modules would otherwise stay importable
# from build/python). Run with -DSRC=<python/tdist> -DDST=<build/python/tdist>.
file(GLOB_RECURSE built RELATIVE ${DST} ${DST}/*.py)
foreach(rel IN LISTS built)
  if(NOT EXISTS ${SRC}/${rel})
    message(STATUS "tdist package: removing stale ${rel}")
    file(REMOVE ${DST}/${rel})
  endif()
endforeach()
