# The R REPL: sources each file named on fd $OI_CMD_FD into the global env (see repl.py).
local({
  commands <- file(paste0("/dev/fd/", Sys.getenv("OI_CMD_FD")), open = "r")
  repeat {
    line <- tryCatch(readLines(commands, n = 1), interrupt = function(e) character(0))
    if (length(line) == 0) { if (isOpen(commands)) next else quit(save = "no") }
    parts <- strsplit(line, "\t", fixed = TRUE)[[1]]
    cat(sprintf("__oi_begin_%s\n", parts[2])); flush(stdout())
    status <- tryCatch({
      withCallingHandlers(
        source(parts[1], local = globalenv(), echo = FALSE, print.eval = TRUE),
        warning = function(w) {
          message("Warning: ", conditionMessage(w)); invokeRestart("muffleWarning") })
      0L
    }, interrupt = function(e) { message("Interrupted"); 130L },
       error = function(e) { message("Error: ", conditionMessage(e)); 1L })
    cat(sprintf("__oi_end_%s__%d\n", parts[2], status))
    flush(stdout())
  }
})
