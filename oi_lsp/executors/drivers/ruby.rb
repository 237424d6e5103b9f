# The Ruby REPL: evaluates each file named on fd $OI_CMD_FD at top level (see repl.py).
$stdout.sync = true
$stderr.sync = true
commands = IO.new(ENV['OI_CMD_FD'].to_i)
scope = TOPLEVEL_BINDING
loop do
  begin
    line = commands.gets
    break if line.nil?
    file, token = line.chomp.split("\t", 2)
    $stdout.write("__oi_begin_#{token}\n")
    status = 0
    begin
      eval(File.read(file), scope, 'code', 1)
    rescue Interrupt
      $stderr.puts 'Interrupted'
      status = 130
    rescue SystemExit
      raise
    rescue Exception => e
      $stderr.puts "#{e.class}: #{e.message}"
      $stderr.puts e.backtrace.reject { |l| l.include?('-e:') }.first(10)
      status = 1
    end
    $stdout.write("__oi_end_#{token}__#{status}\n")
  rescue Interrupt
    # A late interrupt between runs: nothing is running, keep serving.
  end
end
