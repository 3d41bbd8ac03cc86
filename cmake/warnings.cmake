# Warnings for hytra's own targets; -Werror in CI (HYTRA_WERROR=ON).
function(hytra_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${HYTRA_WERROR}>>:-Werror>)
endfunction()
